"""The per-step program every rank runs: an ordered list of ops, the same on all ranks.

A step is a small transformer-like training step under tensor + data parallelism:
data loading, an input copy, a tp broadcast, per layer five forward ops and a tp
all-reduce, the loss, per layer five backward ops (on the autograd thread) with a tp
all-reduce and every few layers an asynchronous dp gradient bucket all-reduce, the
optimizer, zero_grad, a world all-reduce of the loss and ``loss.item()``.

Op templates carry the names and argument shapes copied from real Kineto traces
(``data/hta/nccl_parser_config``) so the generated files read like real ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.synth.config import SynthConfig

# op kinds
DATA, COMPUTE, MEMCPY, MEMSET, COLL, SYNC = range(6)
# threads
MAIN, AUTOGRAD = 0, 1

HIDDEN, TOKENS = 4096, 4096
GEMM = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
GEMM_BW = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x32_stage3_warpsize4x2x1_tensor16x8x16_kernel"
ELEM = ("void at::native::vectorized_elementwise_kernel<4, {f}, at::detail::Array<char*, {n}> >"
        "(int, {f}, at::detail::Array<char*, {n}>)")
LN = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
      "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float, float>"
        "(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
        "FusedAdamMathFunctor<float, 4>, float, float)")


@dataclass(frozen=True)
class Template:
    """How one op looks in a trace: nested CPU op names, its device activity and shapes."""

    cpu: tuple[str, ...]  # outermost first; the launch sits inside the innermost
    device: str  # kernel / memcpy / memset name ("" for none)
    cpu_us: float  # typical host time of the outer op
    gpu_us: float  # typical device time
    dims: tuple = ()
    types: tuple = ()
    grid: tuple[int, int, int] = (1024, 1, 1)
    block: tuple[int, int, int] = (256, 1, 1)
    mem_bytes: int = 0  # activation allocated (fwd, > 0) or freed (bwd, < 0)
    user_annotation: bool = False


def _fwd_templates(tp: int) -> list[Template]:
    h, t = HIDDEN, TOKENS
    act = t * h * 2
    gelu = ELEM.format(f="at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
                       "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
                       "{lambda(c10::BFloat16)#1}", n=2)
    add = ELEM.format(f="at::native::CUDAFunctor_add<c10::BFloat16>", n=3)
    return [
        Template(("aten::layer_norm", "aten::native_layer_norm"), LN, 22, 60, ([t, h], [h], [h], [h], [], []),
                 ("c10::BFloat16",) * 4 + ("Double", "Bool"), (t, 1, 1), (128, 1, 1), act),
        Template(("aten::linear", "aten::addmm"), GEMM, 38, 420 / tp, ([t, h], [3 * h // tp, h], [3 * h // tp]),
                 ("c10::BFloat16",) * 3, (96, 32, 1), (128, 1, 1), 3 * act // tp),
        Template(("aten::gelu",), gelu, 14, 45, ([t, 4 * h // tp], []), ("c10::BFloat16", "String"),
                 (8192, 1, 1), (128, 1, 1), 4 * act // tp),
        Template(("aten::linear", "aten::addmm"), GEMM, 38, 560 / tp, ([t, 4 * h // tp], [h, 4 * h // tp], [h]),
                 ("c10::BFloat16",) * 3, (128, 32, 1), (128, 1, 1), act),
        Template(("aten::add",), add, 12, 30, ([t, h], [t, h], []), ("c10::BFloat16", "c10::BFloat16", "Scalar"),
                 (4096, 1, 1), (128, 1, 1), act),
    ]


def _bwd(fwd: Template, name: str, inner: str) -> Template:
    cpu = (f"autograd::engine::evaluate_function: {name}", name, inner)
    dev = GEMM_BW if fwd.device == GEMM else fwd.device
    return Template(cpu, dev, fwd.cpu_us * 1.4, fwd.gpu_us * 2.0, fwd.dims, fwd.types, fwd.grid, fwd.block,
                    -fwd.mem_bytes)


BWD_NAMES = (("NativeLayerNormBackward0", "aten::native_layer_norm_backward"), ("AddmmBackward0", "aten::mm"),
             ("GeluBackward0", "aten::gelu_backward"), ("AddmmBackward0", "aten::mm"), ("AddBackward0", "aten::add"))

DATA_T = Template(("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",), "", 1800, 0,
                  user_annotation=True)
COPY_T = Template(("aten::to", "aten::_to_copy", "aten::copy_"), "Memcpy HtoD (Pinned -> Device)", 25, 18,
                  ([8, 512], [], [], [], [], []), ("Long", "", "", "", "", "Bool"), mem_bytes=8 * 512 * 8)
LOSS_T = Template(("aten::cross_entropy_loss", "aten::nll_loss_nd", "aten::nll_loss_forward"),
                  ELEM.format(f="at::native::NllLossForwardFunctor<float>", n=2), 30, 80, ([TOKENS, 32000], [TOKENS]),
                  ("c10::BFloat16", "Long"))
OPT_T = Template(("Optimizer.step#AdamW.step", "aten::_fused_adamw_"), ADAM, 240, 900, ([], [], []),
                 ("TensorList", "TensorList", "TensorList"), (320, 1, 1), (512, 1, 1), user_annotation=True)
ZERO_T = Template(("aten::zero_", "aten::fill_"), "Memset (Device)", 10, 45, ([HIDDEN, HIDDEN], []),
                  ("float", "Scalar"))
ITEM_T = Template(("aten::item", "aten::_local_scalar_dense"), "Memcpy DtoH (Device -> Pageable)", 15, 3,
                  ([],), ("float",))


@dataclass(frozen=True)
class Coll:
    """A collective in the program."""

    op: str  # torch collective name: "allreduce", "broadcast"
    group: str  # "tp", "dp" or "world"
    nelems: int
    dtype: str  # "BFloat16" | "Float"
    blocking: bool  # compute stream waits for its end (tp / world); dp buckets overlap


@dataclass
class Program:
    """One step's ops as parallel arrays (index = op position in the step)."""

    kind: np.ndarray  # int8 op kinds
    thread: np.ndarray  # int8 MAIN / AUTOGRAD
    cpu_us: np.ndarray  # float64 typical host time
    gpu_us: np.ndarray  # float64 typical device time (0 for none)
    ref: list  # per op: Template or Coll
    waits_dp: np.ndarray  # bool: compute stream waits for all dp buckets before this op

    @property
    def n(self) -> int:
        """Number of ops per step."""
        return len(self.kind)

    def coll_index(self) -> np.ndarray:
        """Positions of the collectives in the step."""
        return np.flatnonzero(self.kind == COLL)


def build_program(cfg: SynthConfig) -> Program:
    """The ordered ops of one training step for ``cfg`` (identical on every rank)."""
    tp, dp, layers = cfg.tp_size, cfg.dp_size, cfg.layers
    fwd = _fwd_templates(tp)
    bwd = [_bwd(f, *names) for f, names in zip(fwd, BWD_NAMES)]
    act = TOKENS * HIDDEN
    params_per_layer = 6 * 1024 * 1024 // tp  # gradients per layer held by this rank
    bucket = max(1, layers // 4)
    ops: list[tuple[int, int, Template | Coll]] = [(DATA, MAIN, DATA_T), (MEMCPY, MAIN, COPY_T)]
    if tp > 1:
        ops.append((COLL, MAIN, Coll("broadcast", "tp", 8 * 512, "Long", True)))
    for _ in range(layers):
        ops += [(COMPUTE, MAIN, t) for t in fwd]
        if tp > 1:
            ops.append((COLL, MAIN, Coll("allreduce", "tp", act, "BFloat16", True)))
    ops.append((COMPUTE, MAIN, LOSS_T))
    for i in range(layers):
        ops += [(COMPUTE, AUTOGRAD, t) for t in reversed(bwd)]
        if tp > 1:
            ops.append((COLL, AUTOGRAD, Coll("allreduce", "tp", act, "BFloat16", True)))
        if dp > 1 and ((i + 1) % bucket == 0 or i == layers - 1):
            n_layers = bucket if (i + 1) % bucket == 0 else layers % bucket
            ops.append((COLL, AUTOGRAD, Coll("allreduce", "dp", params_per_layer * n_layers, "Float", False)))
    ops += [(COMPUTE, MAIN, OPT_T), (MEMSET, MAIN, ZERO_T)]
    if cfg.ranks > 1:
        ops.append((COLL, MAIN, Coll("allreduce", "world", 1, "Float", True)))
    ops.append((SYNC, MAIN, ITEM_T))
    kind = np.array([o[0] for o in ops], dtype=np.int8)
    ref = [o[2] for o in ops]
    cpu = np.array([r.cpu_us if isinstance(r, Template) else 45.0 for r in ref])
    gpu = np.array([r.gpu_us if isinstance(r, Template) else 0.0 for r in ref])
    waits = np.array([r is OPT_T for r in ref])
    return Program(kind, np.array([o[1] for o in ops], dtype=np.int8), cpu, gpu, ref, waits)
