-- Memory snapshots that tell the truth (issue 21):
-- - a native frame (a file and a line, the file no Python code: "??(0): torch::unwind::unwind()",
--   "CUDACachingAllocator.cpp(0): ...") never stands for a stack: call_stacks.top_frame
--   is the innermost frame that is not native, user_frame skips native frames too, and
--   the library rule compares frames with `/` and `\` alike (rlwh.stacks). rlwh brings
--   the stored stacks to this rule when it next refreshes user frames;
-- - a snapshot's timeline carries what the allocator held (allocator_live_bytes, replayed
--   backwards from the segments), so the derived tables are recomputed;
-- - a snapshot whose segments and trace disagree lands as partial, with a message;
-- - a PyTorch trace adds a ranges row with source 'recorded' (what its events cover, the
--   span role_timeline uses), beside its declared window (source 'profiler').
-- after: refresh derived tables
comment on column call_stacks.top_frame is 'Innermost frame of the stack that is not native (a frame naming a C/C++ or other non-Python file and a line, e.g. ??(0): torch::unwind::unwind(), never stands for it); NULL when every frame is native.';
comment on column sources.status is 'ok, partial (rows salvaged from a damaged file, or a memory snapshot whose segments and trace disagree: every row loaded, message says where), failed (no rows), ignored (a file rlwh does not load; message says why) or skipped (unchanged since the last ingest; rows are those loaded then).';
comment on table _memory_timeline is 'Derived (rlwh ingest): the rows of memory_timeline (name and stack_id only for PyTorch and snapshot rows; the view joins the Ascend ones from _memory_record_ops), stored so timelines and peaks answer at once. For a memory snapshot, allocator_live_bytes is what its allocator held (segments replayed backwards through the trace).';
comment on column ranges.source is 'mstx, nvtx, torch_annotation, overlap (Ascend Overlap Analysis), profiler (a PyTorch trace''s declared window, its "PyTorch Profiler (0)" event) or recorded (what a PyTorch trace''s events cover: the earliest start to the latest end of every other timed event; role_timeline''s span of the capture).';
