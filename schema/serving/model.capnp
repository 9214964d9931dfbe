# The exported model (core/serving/exported_model.h): the model graph (tessera/model.h), its serving
# signatures and its unsharded variables. The file is framed by schema/base/internal/envelope.h around
# one message whose root is `ExportedModel`. Format 1 holds the variables' values inside the
# message (checksummed chunks); format 2 holds where they sit in the data after the message
# (Note [Model file layout] in schema/serving/internal/model_format.h).
#
# Every std::map of the C++ structs is a list of entries in key order, so encoding a decoded
# model again gives the same bytes.
@0x9667e2047b71a727;

$import "/capnp/c++.capnp".namespace("tessera::wire");

using Common = import "/schema/base/common.capnp";

struct ExportedModel {
  formatVersion @0 :UInt32;  # model_format.h's kModelFormatVersion
  spec @1 :ModelSpec;
  signatures @2 :List(Signature);
  variables @3 :List(Variable);  # in name order
  step @4 :Int64;
  # Format 2: the size of the pieces each variable's data is checksummed in (the last piece of a
  # variable shorter), and where the table of those checksums starts, in bytes from the start of
  # the data after the message.
  pieceBytes @5 :UInt32;
  checksumsOffset @6 :UInt64;
  # The Tessera version that wrote it (tessera/version.h, "0.1.0"); absent in files written before
  # versions were recorded.
  writerVersion @7 :Text;
  # The hashed id inputs whose values are texts (core/serving/exported_model.h's text_inputs),
  # sorted; absent in files written before it was recorded.
  textInputs @8 :List(Text);
}

struct Variable {
  name @0 :Text;
  value @1 :Common.Tensor;  # format 1: shape and chunks; format 2: shape only (no chunks)
  # Format 2: the element type (float32) and where the raw little-endian values start, in bytes
  # from the start of the data after the message (a multiple of 8).
  dtype @2 :Common.DType;
  dataOffset @3 :UInt64;
}

struct ModelSpec {
  name @0 :Text;
  inputs @1 :List(Input);
  params @2 :List(Param);
  nodes @3 :List(Node);
  outputs @4 :List(Output);  # in output-name order
  loss @5 :Loss;
}

enum InputKind {
  unspecified @0;
  ids @1;
  dense @2;
  idList @3;  # several (weighted) ids per example: a multi-hot feature
}

struct Input {
  name @0 :Text;
  kind @1 :InputKind;
  width @2 :Int64;
  hashBuckets @3 :Int64;  # 0: ids are table rows; N: raw ids hashed into N buckets (core/base/hash.h)
}

struct Initializer {
  name @0 :Text;
  params @1 :List(Common.NumberEntry);
  seed @2 :UInt64;
}

struct Param {
  name @0 :Text;
  shape @1 :List(Int64);
  initializer @2 :Initializer;
  trainable @3 :Bool;
  partitioned @4 :Bool;
}

struct Node {
  name @0 :Text;
  op @1 :Text;
  inputs @2 :List(Text);
  params @3 :List(Text);
  attrs @4 :List(Common.NumberEntry);
  stringAttrs @5 :List(Common.TextEntry);
}

struct Output {
  name @0 :Text;
  node @1 :Text;
}

struct Loss {
  kind @0 :Text;
  logits @1 :Text;
}

struct TensorSignature {
  name @0 :Text;
  dtype @1 :Common.DType;
  shape @2 :List(Int64);  # -1 for the batch dimension
}

struct Signature {
  name @0 :Text;
  inputs @1 :List(TensorSignature);
  outputs @2 :List(TensorSignature);
}
