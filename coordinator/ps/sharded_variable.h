// ShardedVariable's blocking operations (tessera/variables.h), each a convenience over the
// non-blocking operations of actors/ps/variable_ops.h that workers use through handle() /
// ForWorker(); what stands behind the handle is actors/ps/sharded_variable_state.h.
//
// Thread-safety: as tessera/variables.h.
#pragma once

#include "actors/ps/sharded_variable_state.h"
#include "actors/ps/variable_ops.h"
#include "tessera/variables.h"
