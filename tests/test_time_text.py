"""The SQL rule that turns microsecond text into exact ns (readers/base.us_text_to_ns_sql),
checked against Python's Decimal on every shape profilers write and on garbage; and the
trim that comes before it (readers/base.trimmed_sql), against Python's str.strip."""

from decimal import ROUND_HALF_UP, Decimal

import duckdb
import pytest

from rlwh.readers.base import BLANKS, trimmed_sql, us_text_to_ns_sql


def expected_ns(text: str) -> int:
    """Exact ns, half away from zero: the SQL looks at the 4th decimal only, which
    rounds the same way as the whole value does."""
    return int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


PLAIN = [
    "0", "7", "-7", "+7", "1779785515596661", "1779785515596661.420", "1779785515694669.2",
    "1779785515645038.87", "1779785515645038.", "9.72", "1000.0", "-0.5", "0.0004", "0.0005",
    "-0.0005", "12.34567", "9223372036854775.807",
]
GARBAGE = ["1e5", "2e2.5", "0e1.500", "31e", "-", "+", ".5", "-.5", "1.2.3", "1.-5", "--1.5", "abc", "1 .5",
           "9223372036854775.808", "99999999999999999999"]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_decimals_are_exact(scratch_con, text):
    for strict in (True, False):
        sql = f"select {us_text_to_ns_sql('t', strict)} from (select ?::varchar as t)"
        assert scratch_con.execute(sql, [text]).fetchone()[0] == expected_ns(text)
    assert expected_ns("1779785515596661.420") == 1779785515596661420  # no float on the way


@pytest.mark.parametrize("text", GARBAGE)
def test_anything_else_is_null_or_an_error(scratch_con, text):
    lenient = scratch_con.execute(f"select {us_text_to_ns_sql('t', False)} from (select ?::varchar as t)",
                                  [text]).fetchone()
    assert lenient == (None,)
    with pytest.raises(duckdb.Error):
        scratch_con.execute(f"select {us_text_to_ns_sql('t', True)} from (select ?::varchar as t)", [text]).fetchone()


def test_empty_is_null_in_both_modes(scratch_con):
    for strict in (True, False):
        sql = f"select {us_text_to_ns_sql('t', strict)} from (select ''::varchar as t)"
        assert scratch_con.execute(sql).fetchone() == (None,)


TRIM_CASES = [None, "", " ", "\t", "\r\n", "a", " a", "a ", "a\t", "\ta", "\na\r", " \t a b \r\n",
              "1779785515601661.420\t", "\u00e9 ", " \u7b97\u5b50", "\u00a0a\u00a0", "a\u3000", "a\n\n\n", "  "]


@pytest.mark.parametrize("text", TRIM_CASES)
def test_trimmed_sql_is_python_strip_of_the_blanks(text):
    """Only spaces, tabs, CRs and LFs at either end go; other white space (a no-break
    space, an ideographic space) stays, as Python strips with the same set."""
    found = duckdb.execute(f"select {trimmed_sql('t')} from (select ?::varchar t)", [text]).fetchone()[0]
    assert found == (None if text is None else text.strip(BLANKS))
