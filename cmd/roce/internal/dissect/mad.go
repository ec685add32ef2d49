package dissect

import (
	"errors"
	"strings"

	"github.com/goroce/goroce/wire/mad"
)

// This file is the one place management datagrams plug in: dissectMAD
// turns the payload of a UD packet to QP1 into tree nodes and summary words.
// Every field comes from wire/mad's walkers (Header.All, MAD.DataFields,
// IPCMHeader.All), which read wire/mad's layout tables; names and JSON keys
// are derived from the walkers' field names.

// madDissection is what dissectMAD makes of the payload of a packet to QP1:
// tree nodes for the MAD header, the CM message and the IP CM header, the
// summary words ("CM REQ LocalCommID=0x…"), or an error.
type madDissection struct {
	nodes   []Node
	summary string
	err     error
}

// madValue is a field value decoded by wire/mad; it prints with wire/mad's
// own String and MarshalJSON.
type madValue struct {
	v mad.Value
}

func (m madValue) appendText(b []byte) []byte {
	if m.v.Kind() == mad.KindBytes {
		return Bytes(m.v.Bytes()).AppendText(b)
	}
	return append(b, m.v.String()...)
}

func (m madValue) appendJSON(b []byte) []byte {
	j, err := m.v.MarshalJSON()
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

// madMeaning names enumerated values for JSON's "<key>_name" members (-V
// shows them already, through mad.Value.String).
func madMeaning(v mad.Value) string {
	u := v.Uint()
	switch v.Kind() {
	case mad.KindServiceID:
		if s := mad.ServiceID(u); s.IsIPCM() {
			return s.String()
		}
	case mad.KindMgmtClass:
		return mad.MgmtClass(u).String()
	case mad.KindMethod:
		return mad.Method(u).String()
	case mad.KindStatus:
		return mad.Status(u).String()
	case mad.KindAttributeID:
		return mad.AttributeID(u).String()
	case mad.KindMsgType:
		return mad.MsgType(u).String()
	case mad.KindTransportType:
		return mad.TransportType(u).String()
	case mad.KindRejectReason:
		return mad.RejectReason(u).String()
	case mad.KindSIDRStatus:
		return mad.SIDRStatus(u).String()
	}
	return ""
}

// madNodes turns a wire/mad walk into nodes.
func madNodes(all func(yield func(mad.Field, mad.Value) bool)) []Node {
	var nodes []Node
	for f, v := range all {
		words := splitWords(f.Name)
		name := strings.Join(words, " ")
		if f.Reserved() {
			name = "Reserved"
		}
		nodes = append(nodes, Node{
			Name:  name,
			Key:   strings.ToLower(strings.Join(words, "_")),
			Value: Value{kind: kindMAD, mad: madValue{v}, Meaning: madMeaning(v)},
		})
	}
	return nodes
}

// summaryFields are the CM fields the one-line summary shows, in this order
// of appearance in the message.
var summaryFields = map[string]bool{
	"LocalCommID":  true,
	"RemoteCommID": true,
	"RequestID":    true, // SIDR
	"ServiceID":    true,
	"LocalQPN":     true,
	"QPN":          true, // SIDR_REP
	"Reason":       true, // REJ
	"Status":       true, // SIDR_REP
}

// dissectMAD dissects the payload of a UD packet to QP1.
func dissectMAD(payload []byte) madDissection {
	m, err := mad.Parse(payload)
	if err != nil {
		return madDissection{err: err}
	}
	var d madDissection
	h := m.Header()
	d.nodes = append(d.nodes, layer("MAD Header", "mad", madNodes(h.All())...))
	attr := h.AttributeID()
	var sum strings.Builder
	if m.IsCM() {
		sum.WriteString("CM " + attr.Short())
		for f, v := range m.DataFields() {
			if summaryFields[f.Name] {
				sum.WriteString(" " + f.Name + "=" + v.String())
			}
		}
		name := "CM " + attr.String()
		if s := attr.Short(); s != attr.String() {
			name += " (" + s + ")"
		}
		d.nodes = append(d.nodes, layer(name, "cm", madNodes(m.DataFields())...))
		switch ip, err := m.IPCM(); {
		case err == nil:
			d.nodes = append(d.nodes, layer("IP CM Header (rdma_cm private data)", "ipcm", madNodes(ip.All())...))
		case !errors.Is(err, mad.ErrNotIPCM):
			d.err = err
		}
	} else {
		sum.WriteString("MAD " + h.MgmtClass().String() + " " + h.Method().String() + " " + attr.Short())
		d.nodes = append(d.nodes, layer("MAD Data", "mad_data", madNodes(m.DataFields())...))
	}
	d.summary = sum.String()
	return d
}

// acronyms are the capitalised abbreviations in wire/mad's field names, so
// that a run of capitals splits into words: "LocalCAGUID" is "Local CA GUID".
var acronyms = []string{"SIDR", "GUID", "EECN", "GID", "LID", "QPN", "PSN", "RNR", "ACK", "MTU", "SRQ", "RDC", "ARI", "CA", "CM", "EE", "ID", "IP", "QP", "SL"}

// splitWords splits a Go field name into words: "PrimaryLocalPortGID" →
// Primary Local Port GID, "LocalCAGUID" → Local CA GUID, "MessageMRAed" →
// Message MRAed.
func splitWords(name string) []string {
	isUpper := func(c byte) bool { return c >= 'A' && c <= 'Z' }
	isLower := func(c byte) bool { return c >= 'a' && c <= 'z' }
	var words []string
	for i := 0; i < len(name); {
		j := i + 1
		if isUpper(name[i]) {
			for j < len(name) && isUpper(name[j]) {
				j++
			}
			switch {
			case j-i == 1: // an ordinary word: Capital then lower case
				for j < len(name) && !isUpper(name[j]) {
					j++
				}
			case strings.HasPrefix(name[j:], "ed") && (j+2 == len(name) || isUpper(name[j+2])):
				j += 2 // "MRAed"
			case j < len(name) && isLower(name[j]):
				j-- // the last capital starts the next word: "RNRRetry"
				words = append(words, splitAcronyms(name[i:j])...)
				i = j
				continue
			default:
				words = append(words, splitAcronyms(name[i:j])...)
				i = j
				continue
			}
		} else {
			for j < len(name) && !isUpper(name[j]) {
				j++
			}
		}
		words = append(words, name[i:j])
		i = j
	}
	return words
}

// splitAcronyms splits a run of capitals into known acronyms, longest first.
func splitAcronyms(run string) []string {
	var out []string
	for run != "" {
		n := len(run)
		for _, a := range acronyms {
			if run == a {
				break
			}
			if strings.HasPrefix(run, a) && len(a) < len(run) {
				n = len(a)
				break
			}
		}
		out = append(out, run[:n])
		run = run[n:]
	}
	return out
}
