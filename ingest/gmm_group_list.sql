-- job: gmm_group_list
-- reader: rlwh.readers.gmm
-- fills: gmm_expert_load
-- One grouped-matmul dump (torch.save of group_list): one row per expert. The reader hands
-- what the path says (role, rank, step, op index) and each element of the flattened tensor.
insert into gmm_expert_load by name
select
    * exclude (group_list_position, group_list_value),
    group_list_position::integer    as expert,   -- group_list[i] counts the tokens routed to expert i
    group_list_value                as tokens
from _staged_gmm_expert_load;
