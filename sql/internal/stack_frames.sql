-- One row per call_stacks row: its top_frame, the innermost frame that is not native
-- (rlwh.stacks: a C/C++ frame never stands for a stack), and its user_frame, the innermost
-- such frame outside library code. A frame is library code when it matches warehouse.toml's
-- [stacks] rule (torch, torch_npu, transformers, site-packages, the standard library,
-- <built-in ...> and the like by default), so a team can add its own libraries; rlwh
-- computes each stack's user_frame once (private table internal.stack_user_frames, refreshed at
-- ingest and whenever the rule changes). A stack made only of library frames has no
-- user_frame. Frames are compared with `/` and `\` alike. Private helper of the memory views.
create or replace view internal.stack_frames as
with stacks as (
  select * from call_stacks
),

user_frames as (
  select * from internal.stack_user_frames
),

final as (
  select s.stack_id, s.top_frame, u.user_frame
  from stacks as s
  left join user_frames as u on s.stack_id = u.stack_id
)

select * from final
