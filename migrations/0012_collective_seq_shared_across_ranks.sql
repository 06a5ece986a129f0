-- Collectives meet by the source's own sequence number where it records one (issue 22):
-- device_ops.seq_is_global says whether seq is that number (the same on every rank of the
-- group: Kineto's Seq) or only the collective's order on its rank. Ascend text exports
-- without trace_view.json now land their device rows from kernel_details.csv.
alter table device_ops add column seq_is_global boolean;
comment on column device_ops.seq_is_global is 'For communication: true when seq is the source''s own sequence number of the collective in its process group, which every rank of the group counts alike (Kineto''s Seq), so ranks meet by it; false when seq is the collective''s order on this rank. NULL for other kinds.';
comment on table device_ops is 'One row per device activity of a rank: a kernel, a collective, a memcpy or memset (Ascend trace_view.json device and HCCL rows, or kernel_details.csv with communication.json where the capture has no trace; db TASK / COMMUNICATION_OP; Kineto kernel, gpu_memcpy, gpu_memset and MTIA device events). A collective is one row (its HCCL or NCCL tasks are not repeated), and an activity two files describe lands once.';
comment on column device_ops.source_type is 'The source''s own type of the row: Ascend Task Type (AI_CORE, PCIE_DMA_SQE, ...), kernel_details.csv''s Accelerator Core (AI_VECTOR_CORE, HCCL, ...), HCCL for an op row; the Kineto category (kernel, gpu_memcpy, gpu_memset, mtia_ccp_events).';
comment on column device_ops."group" is 'For communication: the process group or HCCL group as the source names it (Kineto Process Group Name, db COMMUNICATION_OP.groupName, the trace''s HCCL thread such as Group 0, communication.json''s group after the @); NULL when the source names none.';
update device_ops set seq_is_global = false where kind = 'communication';
-- A DSA task (DSAGenBitMask) is a kernel, as kernel_details.csv lists it; text exports said memcpy.
update device_ops set kind = 'compute' where kind = 'memcpy' and upper(source_type) like 'DSA%';

-- Traces loaded before recorded no seq_is_global: the next ingest reads them again.
update sources set fingerprint = 'reload: device_ops.seq_is_global added by migration 0012'
where fingerprint is not null and kind = 'torch_trace';
