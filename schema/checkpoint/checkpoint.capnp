# The checkpoint bundle (core/checkpoint/checkpoint.h, docs/design.md §3): one slice file per saved shard and a
# manifest naming them, written last. Each file is framed by schema/base/internal/envelope.h (magic,
# size, CRC-32) around one message whose root is `TensorSlice` or `Manifest`; a slice file's float
# data follows its message (Note [Slice file layout] in schema/checkpoint/slice_file.cc).
@0xc9d3d2db45c6cf1f;

$import "/capnp/c++.capnp".namespace("tessera::wire");

using Common = import "/schema/base/common.capnp";

# A run's identity (core/checkpoint/checkpoint.h's RunId): 128 random bits; absent or zero: none (a file written
# before run ids).
struct RunId {
  high @0 :UInt64;
  low @1 :UInt64;
}

# Rows [rowOffset, rowOffset + value.shape[0]) of variable `variable`, with the optimizer's slots.
# Format 1 kept the floats in `value.chunks` and each slot's `chunks`; format 2 (the current one)
# leaves those empty and keeps the floats in the file's tail, value first, then each slot in order,
# each checked 1 MiB at a time by the CRC-32Cs in `valueCrc32c` and the slot's `crc32c`.
struct TensorSlice {
  formatVersion @0 :UInt32;  # checkpoint_format.h's kSliceFormatVersion
  variable @1 :Text;
  fullShape @2 :List(Int64);
  dtype @3 :Common.DType;
  rowOffset @4 :Int64;
  value @5 :Common.Tensor;   # the slice's shape (and, in format 1, values)
  slots @6 :List(Slot);      # in the optimizer's slot order, each of value's shape
  step @7 :Int64;            # the optimizer's step count
  valueCrc32c @8 :List(UInt32);  # format 2: of each 1 MiB piece of the value's data in the tail
  # The checkpoint the file belongs to (Note [Checkpoint identity], core/checkpoint/checkpoint.h): the run
  # that saved it and the global step; absent in files written before run ids.
  runId @9 :RunId;
  checkpointStep @10 :Int64;

  struct Slot {
    name @0 :Text;
    chunks @1 :List(Common.Chunk);  # format 1 only
    crc32c @2 :List(UInt32);        # format 2: as valueCrc32c, for this slot's data
  }
}

struct Manifest {
  formatVersion @0 :UInt32;  # checkpoint_format.h's kManifestFormatVersion
  globalStep @1 :Int64;
  variables @2 :List(Variable);
  runId @3 :RunId;           # the run that saved it; absent in manifests written before run ids
  # The Tessera version that wrote it (tessera/version.h, "0.1.0"); absent in manifests written
  # before versions were recorded.
  writerVersion @4 :Text;

  struct Variable {
    name @0 :Text;
    shape @1 :List(Int64);
    dtype @2 :Common.DType;
    optimizer :union {
      none @3 :Void;           # saved without an optimizer
      spec @4 :OptimizerSpec;
    }
    slotNames @5 :List(Text);
    step @6 :Int64;
    slices @7 :List(SliceRef);  # in row order, tiling [0, shape[0])
  }

  struct OptimizerSpec {
    name @0 :Text;
    params @1 :List(Common.NumberEntry);
  }

  struct SliceRef {
    file @0 :Text;  # a plain file name inside the checkpoint directory
    rowOffset @1 :Int64;
    rows @2 :Int64;
  }
}
