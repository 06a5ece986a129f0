"""What a device activity's name says: the collective it runs, and whether it is one.

One home for the naming rule every device reader uses (Ascend trace and db, Kineto), as
SQL text each reader's DuckDB connection evaluates. HCCL names its ops hcom_<collective>_
(hcom_allReduce__586_0_1); NCCL and RCCL name kernels ncclKernel_<Collective>_... or
ncclDevKernel_<Collective>_...; the source's own collective name (Kineto's "Collective
name") wins where it has one.
"""

from __future__ import annotations

# Tested in order: "allreduce" before "reduce", "sendrecv" before "send" and "recv",
# "reducescatter" before "reduce". Matched on the name lowered with '_' and '-' removed.
COLLECTIVES = (
    ("allreduce", "allreduce"),
    ("allgather", "allgather"),
    ("reducescatter", "reducescatter"),
    ("alltoall", "alltoall"),
    ("broadcast", "broadcast"),
    ("sendrecv", "sendrecv"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("receive", "recv"),
    ("recv", "recv"),
    ("send", "send"),
)

# Kernel names of the collective libraries (NCCL, RCCL on ROCm; HCCL ops on Ascend).
_COMMUNICATION_NAME = r"^(nccl|rccl|hcom_|hccl)"

# Ascend task types (the trace's Task Type, TASK.taskType, kernel_details.csv's Accelerator
# Core) of kernels: AI Core, AI Vector, AI CPU, mixed cube/vector, and DSA (the random-number
# unit that runs DSAGenBitMask and the like; kernel_details.csv and COMPUTE_TASK_INFO list
# them as kernels). The db spells them KERNEL_AICORE, KERNEL_AIVEC, ...
ASCEND_COMPUTE_TASK_TYPES = r"^(AI_|MIX_|KERNEL_|AICPU|AIV|AIC|DSA)"
# ... and of copies: PCIe DMA, SDMA, MEMCPY_ASYNC.
ASCEND_MEMCPY_TASK_TYPES = r"^(PCIE_DMA|SDMA_SQE|MEMCPY)"
# Task types that name no core: older torch_npu (2024) types nearly every kernel "Other".
ASCEND_UNTYPED_TASK_TYPES = ("", "OTHER", "UNKNOWN")
# The tasks HCCL runs for a collective, as its Plane threads and the Ascend Hardware rows
# name them ("Notify Wait", "Notify_Record", "Write Value", "SDMA", "RDMA", "Memcpy",
# "Reduce_Inline", "Reduce TBE"), matched on the name lowered with all but letters removed.
# No kernel is named so; "MEMCPY_ASYNC" (a copy the runtime runs) is not among them.
ASCEND_HCCL_TASK_NAMES = (r"^(notifywait|notifyrecord|writevalue|sdma|rdma|rdmasend|memcpy|reduceinline|"
                          r"inlinereduce|reducetbe|localcopy)$")
# The runtime's own tasks, named after their type: stream events, profiling marks, place
# holders, model bookkeeping. Neither a kernel nor a collective's.
ASCEND_RUNTIME_TASK_NAMES = r"^(event(record|wait|reset)|profiling(enable|disable)|placeholder|model[a-z]*)$"


def collective_sql(name: str, source_name: str = "null") -> str:
    """SQL: the collective of an activity named `name` (a column), or NULL when it names none.
    `source_name` is a column holding the source's own collective name, if any."""
    squashed = f"regexp_replace(lower({name}), '[_-]', '', 'g')"
    own = f"nullif(regexp_replace(lower({source_name}), '[_-]', '', 'g'), '')"
    cases = " ".join(f"when contains(coalesce({own}, {squashed}), '{word}') then '{value}'"
                     for word, value in COLLECTIVES)
    return f"(case {cases} else null end)"


def is_communication_sql(name: str) -> str:
    """SQL: true when `name` is a collective library's kernel or op (ncclKernel_*, hcom_*)."""
    return f"regexp_matches(lower({name}), '{_COMMUNICATION_NAME}')"


def collective_of(name: str | None) -> str | None:
    """collective_sql's rule in Python, for readers without DuckDB (the Ascend db)."""
    if not name:
        return None
    squashed = name.lower().replace("_", "").replace("-", "")
    return next((value for word, value in COLLECTIVES if word in squashed), None)


def ascend_task_kind_sql(task_type: str, name: str) -> str:
    """SQL: compute, memcpy or other for an Ascend task of type `task_type` named `name`."""
    return (f"(case when regexp_matches(upper({task_type}), '{ASCEND_COMPUTE_TASK_TYPES}') then 'compute' "
            f"when regexp_matches(upper({task_type}), '{ASCEND_MEMCPY_TASK_TYPES}') "
            f"or starts_with({name}, 'MEMCPY') then 'memcpy' else 'other' end)")


def ascend_is_untyped_sql(task_type: str) -> str:
    """SQL: true when an Ascend task's type names no core ('Other', empty or missing)."""
    untyped = ", ".join(f"'{t}'" for t in ASCEND_UNTYPED_TASK_TYPES)
    return f"(upper(trim(coalesce({task_type}, ''))) in ({untyped}))"


def ascend_is_runtime_task_sql(name: str) -> str:
    """SQL: true when an Ascend task's name is one of the runtime's own tasks (EVENT_RECORD, ...)."""
    return f"regexp_matches(regexp_replace(lower({name}), '[^a-z]', '', 'g'), '{ASCEND_RUNTIME_TASK_NAMES}')"


def ascend_is_hccl_task_sql(name: str) -> str:
    """SQL: true when an Ascend task's name is one HCCL gives the tasks of a collective, or
    the name of an HCCL op itself (hcom_allReduce_...)."""
    letters = f"regexp_replace(lower({name}), '[^a-z]', '', 'g')"
    return f"(regexp_matches({letters}, '{ASCEND_HCCL_TASK_NAMES}') or {is_communication_sql(name)})"
