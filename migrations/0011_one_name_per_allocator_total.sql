-- One fact, one name: the allocator's totals right after a block's allocation and after its
-- release are alloc_total_* / release_total_* in memory_records, memory_alloc_stack,
-- memory_blocks and memory_peak_breakdown alike (the views said allocated_after_alloc_bytes
-- and so on). The derived PyTorch blocks take the same names; a never-released PyTorch
-- block's release_inferred is false, as for every other source (it was NULL).
-- after: refresh derived tables
alter table internal.torch_memory_blocks rename column allocated_after_alloc_bytes to alloc_total_allocated_bytes;
alter table internal.torch_memory_blocks rename column reserved_after_alloc_bytes to alloc_total_reserved_bytes;
alter table internal.torch_memory_blocks rename column allocated_after_release_bytes to release_total_allocated_bytes;
alter table internal.torch_memory_blocks rename column reserved_after_release_bytes to release_total_reserved_bytes;
