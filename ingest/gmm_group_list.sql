-- job: gmm_group_list
-- reader: rlwh.readers.gmm
-- fills: gmm_expert_load
-- One grouped-matmul dump (torch.save of group_list): one row per expert.
insert into gmm_expert_load by name
select * from _staged_gmm_expert_load;
