-- One row per call_stacks row: its innermost frame and its user_frame, the innermost
-- frame outside library code. A frame is library code when it matches the regular
-- expression that rlwh writes into _rlwh_settings ('library_frames') from warehouse.toml's
-- [stacks] section (torch, torch_npu, transformers, site-packages, the standard library,
-- <built-in ...> and the like by default), so a team can add its own libraries. A stack
-- made only of library frames has no user_frame. Private helper of the memory views.
create or replace view _stack_frames as
with rule as (
  select coalesce(max(value), '^<') as pattern from _rlwh_settings where name = 'library_frames'
),

final as (
  select
    s.stack_id,
    s.top_frame,
    list_filter(string_split(s.stack, chr(10)), f -> not regexp_matches(f, r.pattern))[1] as user_frame,
  from call_stacks as s
  cross join rule as r
)

select * from final
