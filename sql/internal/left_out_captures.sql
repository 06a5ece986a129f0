-- The captures the views leave out, one row each: repeats of a counted capture of the same
-- profiler, rank and step (internal.rank_captures has the rule). A view applies the rule
-- to its base rows with `anti join internal.left_out_captures using (run, capture)` (a
-- capture path is unique within a run), so a row of any other capture always counts.
-- depends: internal.rank_captures
create or replace view internal.left_out_captures as
select run, capture from internal.rank_captures where not counted
