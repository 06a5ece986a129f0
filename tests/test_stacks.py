"""The frame rules of rlwh.stacks, in Python and in the SQL the warehouse runs, agree."""

import pytest

from rlwh import stacks

LINUX_SNAPSHOT = "\n".join([
    "??(0): torch::unwind::unwind()",
    "memory_snapshot.cpp(0): torch::cuda::(anonymous namespace)::gather_with_cpp()",
    "CUDACachingAllocator.cpp(0): c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc()",
    "(0): c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
    "/venv/lib/python3.12/site-packages/torch/nn/functional.py(2140): softmax",
    "??(0): _PyEval_EvalFrameDefault",
    "/home/me/proj/nn_utils.py(6): softmax",
    "/home/me/proj/model.py(39): forward",
])
WINDOWS = "\n".join([
    "??(0): c10::cuda::CUDACachingAllocator::malloc",
    "D:\\work\\proj\\.venv\\Lib\\site-packages\\torch\\functional.py(373): einsum",
    "C:\\Users\\me\\AppData\\Local\\Programs\\Python\\Python311\\Lib\\threading.py(1002): _bootstrap",
    "D:\\work\\proj\\train.py(12): step",
])
KINETO = "<built-in method empty of type object at 0x7fab>\ntorch/nn/modules/module.py(1501): _call_impl\n" \
    "train.py(3): main"
ONLY_NATIVE = "??(0): torch::unwind::unwind()\nlibc.so.6(0): start"

CASES = [
    (LINUX_SNAPSHOT, "/venv/lib/python3.12/site-packages/torch/nn/functional.py(2140): softmax",
     "/home/me/proj/nn_utils.py(6): softmax"),
    (WINDOWS, "D:\\work\\proj\\.venv\\Lib\\site-packages\\torch\\functional.py(373): einsum",
     "D:\\work\\proj\\train.py(12): step"),
    (KINETO, "<built-in method empty of type object at 0x7fab>", "train.py(3): main"),
    (ONLY_NATIVE, None, None),
    ("<string>(1): <module>", "<string>(1): <module>", None),
]


@pytest.mark.parametrize(("stack", "top", "user"), CASES)
def test_native_frames_never_stand_for_a_stack(scratch_con, stack, top, user):
    rule = stacks.library_pattern()
    assert stacks.top_frame(stack) == top
    assert stacks.user_frame(stack, rule) == user
    sql = f"select {stacks.top_frame_sql('$stack')}, {stacks.user_frame_sql('$stack', '$rule')}"
    assert scratch_con.execute(sql, {"stack": stack, "rule": rule}).fetchone() == (top, user)


@pytest.mark.parametrize("frame", [
    "??(0): torch::unwind::unwind()", "(0): c10::x", "RegisterCUDA_0.cpp(0): at::create_out",
    "kernel.CU(3): k", "libtorch_cuda.so(0): f", "ops.h(12): g",
])
def test_native(frame):
    assert stacks.is_native(frame)


@pytest.mark.parametrize("frame", [
    "model.py(3): f", "C:\\x\\model.PY(3): f", "mod.pyx(9): g", "<frozen importlib._bootstrap>(1007): _find_and_load",
    "<built-in method add>", "nn.Module: Linear_0", "aten::add",
])
def test_not_native(frame):
    assert not stacks.is_native(frame)


def test_a_pattern_written_with_slashes_matches_backslash_paths():
    rule = stacks.library_pattern((r"(^|/)megatron/",), stdlib=False)
    assert stacks.is_library("E:\\src\\megatron\\core\\layer.py(5): f", rule)
    assert not stacks.is_library("E:\\src\\mine\\layer.py(5): f", rule)


def test_stacks_stored_under_an_older_rule_are_brought_to_this_one(attached_db):
    """A warehouse whose stacks were stored when native frames stood for them: the next
    refresh (ingest, rlwh init, migration 0009) recomputes top_frame and user_frame."""
    from rlwh.readers.base import stack_id
    from rlwh.warehouse import derive

    sid = stack_id(LINUX_SNAPSHOT)
    attached_db.execute("insert into call_stacks values (?, ?, '??(0): torch::unwind::unwind()', 8)",
                        [sid, LINUX_SNAPSHOT])
    attached_db.execute("insert into internal.stack_user_frames values (?, '??(0): torch::unwind::unwind()', "
                        "'an older rule')", [sid])
    assert derive.refresh_user_frames(attached_db) == 1
    row = attached_db.execute("select top_frame, user_frame from internal.stack_frames").fetchone()
    assert row == CASES[0][1:]
    assert derive.refresh_user_frames(attached_db) == 0
