package verbs

import "github.com/goroce/goroce/internal/transport"

// QPInfo is a QP's resource view, what `rdma res show qp` prints: type,
// state, local and remote QPN, send and receive PSNs, PD number. Get it
// with QP.Info; Device.QPs lists a device's live QPs in QPN order.
type QPInfo = transport.QPInfo
