package verbs

import (
	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/wire"
)

// Access is a set of memory access flags, enum ibv_access_flags: what a
// memory region (PD.RegMR) or a QP (QPAttr.AccessFlags) allows. Its String
// method names the flags as ibverbs does, e.g. "LOCAL_WRITE|REMOTE_READ".
// It is the memory table's own type (internal/mem), which checks every
// access against it.
type Access = mem.Access

// Memory access flags (IBV_ACCESS_*), with ibverbs' values.
const (
	AccessLocalWrite      = mem.LocalWrite      // the device may write the memory (receives, READ responses, atomics' results)
	AccessRemoteWrite     = mem.RemoteWrite     // peers may RDMA WRITE it; needs AccessLocalWrite
	AccessRemoteRead      = mem.RemoteRead      // peers may RDMA READ it
	AccessRemoteAtomic    = mem.RemoteAtomic    // peers may run atomics on it; needs AccessLocalWrite
	AccessMWBind          = mem.MWBind          // memory windows may be bound to it (PD.AllocMW)
	AccessFlushGlobal     = mem.FlushGlobal     // peers may FLUSH it to global visibility
	AccessFlushPersistent = mem.FlushPersistent // peers may FLUSH it to persistence
	AccessZeroBased       = mem.ZeroBased       // a memory window peers address from 0 (type 2 windows only)
	AccessRelaxedOrdering = mem.RelaxedOrdering // a hint ibverbs lets a device ignore
)

// GSIQKey is QP1's well-known Q_Key, 0x80010000 (IBTA Vol 1 §13.5.3.1).
const GSIQKey = wire.GSIQKey
