"""Data parallelism for the demo: torchrun's process group, DDP or FSDP2 around either model, sharded checkpoints.

One process (no torchrun) is world size 1: no process group, no wrapper, the same code path.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """Who this process is among the data-parallel ranks."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: Optional[str] = None  # None: one process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def init_world(device: str, timeout_s: float) -> World:
    """The World from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, LOCAL_RANK): a process
    group (nccl for CUDA, gloo for CPU) whose collectives give up after `timeout_s` seconds; without
    that environment, World() (one process, no group)."""
    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return World()
    world_size = int(os.environ["WORLD_SIZE"])
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return World(rank, world_size, local_rank, backend)


def close_world(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


class HostLengths:
    """A batch's lengths (int64 host tensors), boxed: FSDP's root moves a forward's tensor inputs to
    the device, and the models want their lengths on the host (no device reads)."""
    __slots__ = ("feature_lengths", "target_lengths")

    def __init__(self, feature_lengths: torch.Tensor, target_lengths: torch.Tensor):
        self.feature_lengths, self.target_lengths = feature_lengths, target_lengths


class LossModule(torch.nn.Module):
    """`model.loss` as a forward, so that DDP and FSDP (which act on forward calls) see it:
    forward(features, targets, lengths: HostLengths, total_labels, total_seqs) -> model.loss(...),
    the logits detached."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, features, targets, lengths: HostLengths, total_labels: Optional[int] = None,
                total_seqs: Optional[int] = None):
        loss, logits, out_lengths = self.model.loss(features, lengths.feature_lengths, targets, lengths.target_lengths,
                                                    total_labels=total_labels, total_seqs=total_seqs)
        return loss, logits.detach(), out_lengths  # the logits are for decoding, not for gradients


def sync_batch_norms(model: torch.nn.Module, impl: str) -> None:
    """Batch-norm statistics over the whole step's batch, all ranks together (both models)."""
    if impl == "dimtorch":
        import dimtorch as dt
        dt.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    else:
        from demo.reference_model import sync_batch_norm
        sync_batch_norm(model)


def parallelize(model: torch.nn.Module, impl: str, world: World, fsdp: bool,
                compile_kwargs: Optional[dict] = None) -> torch.nn.Module:
    """The module the training step calls: LossModule(model), wrapped in DDP, or with FSDP2 applied
    to each encoder and decoder layer and then the whole (fully_shard; dt.nn.fully_shard for the
    dimtorch model, whose layers take and return dimtorch Tensors).

    compile_kwargs (FSDP only): each layer is torch.compile'd (fullgraph, with these arguments) before
    it is sharded, as PyTorch's FSDP2 recipes (torchtitan) do: FSDP2's all-gather and reduce-scatter hooks
    run eagerly around each compiled layer (Dynamo skips FSDP's hooks: a whole-model graph would break at
    every layer); the front end, the loss and the root's hooks stay eager."""
    module = LossModule(model)
    if not world.distributed:
        return module
    sync_batch_norms(model, impl)
    if fsdp:
        if impl == "dimtorch":
            import dimtorch as dt
            shard = dt.nn.fully_shard
        else:
            from torch.distributed.fsdp import fully_shard as shard
        stacks = [model.encoder.layers] + ([model.decoder.layers] if hasattr(getattr(model, "decoder", None),
                                                                          "layers") else [])
        for layers in stacks:
            for i, layer in enumerate(layers):
                if compile_kwargs is not None:
                    layer = layers[i] = torch.compile(layer, fullgraph=True, **compile_kwargs)
                shard(layer)
        shard(module)
        return module
    # device_ids=None: DDP leaves the inputs where they are (the lengths stay on the host).
    # forward_sync_buffers=False: the synced batch norms keep the running statistics equal on all ranks.
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=None, forward_sync_buffers=False)


@contextlib.contextmanager
def unsharded_for_evaluation(module: torch.nn.Module):
    """Within it, every FSDP2 module of `module` (parallelize's layers and root) holds its whole parameters:
    all-gathered once on entry (every rank, in the same order) and freed on exit. Forward calls inside then run
    no collective, so each rank may call any module any number of times: the attention decoder's greedy
    decoding runs as many steps as its own sequences need, without desynchronizing the ranks. Without FSDP
    modules (one process, DDP) it does nothing.

    FSDP2 (torch 2.13) keeps its hooks while unsharded: the pre-forward hook finds the parameters unsharded and
    gathers nothing, but the post-forward hook would reshard them after the first call, so reshard-after-forward
    is off inside (as FSDPModule.set_reshard_after_forward documents for evaluation) and back to parallelize's
    setting after (on for the layers, off for the root). On exit the root's reset_iter_state() reshards and
    clears FSDP's per-iteration records (call it between training steps: no gradient is in flight then). FSDP picks its root lazily at the root's first forward;
    an evaluation before any training step calls that initialization itself (idempotent; torch has no public
    name for it), else a layer called first would take itself for the root."""
    from torch.distributed.fsdp import FSDPModule
    sharded = [m for m in module.modules() if isinstance(m, FSDPModule)]
    if not sharded:
        yield
        return
    root = sharded[0]
    root._get_fsdp_state()._lazy_init()
    root.set_reshard_after_forward(False)  # recursive: every FSDP module under the root
    for m in sharded:
        m.unshard()
    try:
        yield
    finally:
        # Reshards every module, and forgets the order of this evaluation's forward calls: FSDP records it even
        # without gradients and its next backward would prefetch by it (a different all-gather on each rank).
        root.reset_iter_state()
        root.set_reshard_after_forward(True)
        root.set_reshard_after_forward(False, recurse=False)  # the root keeps its parameters for the backward


def all_reduce_sum(values: torch.Tensor, world: World) -> torch.Tensor:
    """`values` summed over the ranks (as is with one process); a host tensor goes through the GPU
    under nccl, which reduces CUDA tensors only."""
    if not world.distributed:
        return values
    if world.backend == "nccl" and values.device.type == "cpu":
        on_gpu = values.cuda()
        dist.all_reduce(on_gpu)
        return on_gpu.cpu()
    dist.all_reduce(values)
    return values


def gather_objects(obj, world: World) -> List:
    """[obj of rank 0, obj of rank 1, ...] on every rank."""
    if not world.distributed:
        return [obj]
    out = [None] * world.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


# ------------------------------------------------------------------------------- sharded checkpoints

def save_sharded(folder: Path, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the model and optimizer state to `folder` (a new folder;
    torch.distributed.checkpoint, which reshards on load: any number of ranks can read it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_state, optim_state = get_state_dict(module, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(folder))


# What a sharded checkpoint's metadata file may name: torch.distributed.checkpoint's own records.
_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "ChunkStorageMetadata", "BytesStorageMetadata", "_MEM_FORMAT_ENCODING")
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
     ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath")}


class ShardedCheckpointError(RuntimeError):
    """A sharded checkpoint cannot be loaded (the message says why)."""


class UnsafeCheckpointError(ShardedCheckpointError):
    """A sharded checkpoint holds something other than plain data; nothing of it was run."""


def _safe_dcp_classes():
    """(storage reader, load planner) classes for torch.distributed.checkpoint that load plain data
    only. torch 2.13's FileSystemReader unpickles the metadata file with pickle.load and its
    DefaultLoadPlanner reads non-tensor entries with an unrestricted torch.load: either would run
    code hidden in a foreign checkpoint. Here the metadata may name only DCP's own record classes and
    the entries load with weights_only=True."""
    import io
    import pickle
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

    class RestrictedUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
            if (module, name) not in _METADATA_GLOBALS and not dtype:
                raise UnsafeCheckpointError(f"its metadata names {module}.{name}, which is not checkpoint metadata")
            return super().find_class(module, name)

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            with open(Path(self.path) / ".metadata", "rb") as f:
                metadata = RestrictedUnpickler(io.BytesIO(f.read())).load()
            if getattr(metadata, "storage_meta", None) is None:
                from torch.distributed.checkpoint.metadata import StorageMeta
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value):
            # Proven plain by the safe loader first; DCP's own (unsafe) load then sees only those bytes.
            try:
                torch.load(value, weights_only=True)
            except pickle.UnpicklingError as e:
                what = next((ln for ln in str(e).splitlines() if "GLOBAL" in ln), "not plain data")
                raise UnsafeCheckpointError(f"its entry {read_item.dest_index.fqn}: {what.strip()}") from None
            value.seek(0)
            super().load_bytes(read_item, value)

    return SafeReader, SafePlanner


def load_sharded(folder: Path, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Reads what save_sharded wrote (with any number of ranks) into `module` and `optimizer`, plain
    data only (UnsafeCheckpointError otherwise, before anything of it is used)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_state, optim_state = get_state_dict(module, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    reader, planner = _safe_dcp_classes()
    try:
        dcp.load(state, storage_reader=reader(str(folder)), planner=planner())
    except dcp.api.CheckpointException as e:  # a BaseException, holding each rank's failure
        first = next(iter(e.failures.values()))[0] if e.failures else e
        raise ShardedCheckpointError(f"{type(first).__name__}: {str(first).strip().splitlines()[0]}") from None
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def remove_old_shards(out: Path, keep: Sequence[str]) -> None:
    """Deletes the sharded-checkpoint folders in `out` other than `keep` (rank 0, after the new
    checkpoint file points at the new folder)."""
    for p in out.glob("sharded-step-*"):
        if p.name not in keep and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
