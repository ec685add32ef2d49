package verbs_test

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestWCOpcodeNames: every enum ibv_wc_opcode value prints as rdma-core's
// verbs.h names it, and any other value as IBV_WC_OPCODE(n), for all 256
// values (the names come from one table, wcOpcodeNames).
func TestWCOpcodeNames(t *testing.T) {
	want := map[int]string{0: "IBV_WC_SEND", 1: "IBV_WC_RDMA_WRITE", 2: "IBV_WC_RDMA_READ", 3: "IBV_WC_COMP_SWAP",
		4: "IBV_WC_FETCH_ADD", 5: "IBV_WC_BIND_MW", 6: "IBV_WC_LOCAL_INV", 9: "IBV_WC_ATOMIC_WRITE", 10: "IBV_WC_FLUSH",
		128: "IBV_WC_RECV", 129: "IBV_WC_RECV_RDMA_WITH_IMM"}
	for v := range 256 {
		w, ok := want[v]
		if !ok {
			w = fmt.Sprintf("IBV_WC_OPCODE(%d)", v)
		}
		if got := verbs.WCOpcode(v).String(); got != w {
			t.Errorf("WCOpcode(%d) = %q, want %q", v, got, w)
		}
	}
}
