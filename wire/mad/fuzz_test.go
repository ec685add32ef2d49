package mad

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// FuzzParseMAD feeds arbitrary bytes to Parse. It must never panic; where it
// succeeds, every walker, String and MarshalJSON must work, and re-encoding
// the decoded header and message Fields must reproduce every field the
// message defines (reserved fields come back as zero), hence the identical
// bytes when the input's reserved bits are zero. Seeds: the encoder's output
// for every message, the CM MADs of the rxe traces, and some near misses.
func FuzzParseMAD(f *testing.F) {
	for _, s := range sampleMessages() {
		b := s.bytes()
		f.Add(b)
		f.Add(b[:Size-1])
	}
	for _, tm := range traceMADsIfPresent(f) {
		f.Add(tm.mad)
	}
	sa := HeaderFields{BaseVersion: 1, MgmtClass: ClassSubnAdm, ClassVersion: 2, Method: MethodGetResp,
		Status: StatusUnsupportedMethodAttribute, AttributeID: 0x0035}.Append(nil)
	f.Add(sa)
	f.Add(append(sa, make([]byte, DataLen)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		m, err := Parse(b)
		if err != nil {
			if m != nil {
				t.Fatalf("Parse returned a MAD and %v", err)
			}
			return
		}
		if !bytes.Equal(b, in) {
			t.Fatal("Parse modified its input")
		}
		exercise(t, m.Header().All())
		exercise(t, m.DataFields())
		if h, err := m.IPCM(); err == nil {
			exercise(t, h.All())
			re := h.Fields().Append(nil)
			h2, err := ParseIPCMHeader(re)
			if err != nil {
				t.Fatalf("re-encoded IP CM header does not parse: %v", err)
			}
			sameFields(t, "IPCMHeader", collect(h.All()), collect(h2.All()))
		}

		out := m.Header().Fields().Append(nil)
		if fields := decodeCM(m); fields != nil {
			out = fields.Append(out)
			if err := fields.Validate(); err != nil {
				t.Fatalf("decoded fields do not validate: %v", err)
			}
		} else {
			out = append(out, m.Data()...)
		}
		m2, err := Parse(out)
		if err != nil {
			t.Fatalf("re-encoded MAD does not parse: %v", err)
		}
		sameFields(t, "Header", collect(m.Header().All()), collect(m2.Header().All()))
		before, after := collect(m.DataFields()), collect(m2.DataFields())
		sameFields(t, m.Header().AttributeID().Short(), before, after)
		if !reservedSet(before) && !reservedSet(collect(m.Header().All())) && !bytes.Equal(out, b) {
			t.Fatalf("re-encoded MAD differs:\n got %x\nwant %x", out, b)
		}
	})
}

type fieldValue struct {
	f Field
	v Value
}

func collect(seq func(func(Field, Value) bool)) []fieldValue {
	var out []fieldValue
	for f, v := range seq {
		out = append(out, fieldValue{f, v})
	}
	return out
}

// exercise formats every value, as the CLI would.
func exercise(t *testing.T, seq func(func(Field, Value) bool)) {
	for f, v := range seq {
		if v.String() == "" && !(f.Kind == KindBytes && len(v.Bytes()) == 0) {
			t.Fatalf("%s: empty String", f.Name)
		}
		j, err := v.MarshalJSON()
		if err != nil || !json.Valid(j) {
			t.Fatalf("%s: MarshalJSON = %s, %v", f.Name, j, err)
		}
	}
}

// sameFields checks that b, decoded from the re-encoding of a, holds the same
// value in every defined field and zero in every reserved one.
func sameFields(t *testing.T, what string, a, b []fieldValue) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d fields before re-encoding, %d after", what, len(a), len(b))
	}
	for i := range a {
		fa, fb := a[i], b[i]
		if fa.f != fb.f {
			t.Fatalf("%s: field %d is %v, then %v", what, i, fa.f, fb.f)
		}
		if fa.f.Reserved() {
			if fb.v.Uint() != 0 {
				t.Fatalf("%s.%s: reserved field re-encoded as %v", what, fa.f.Name, fb.v)
			}
			continue
		}
		if fa.v.Uint() != fb.v.Uint() || !bytes.Equal(fa.v.Bytes(), fb.v.Bytes()) {
			t.Fatalf("%s.%s: %v before re-encoding, %v after", what, fa.f.Name, fa.v, fb.v)
		}
	}
}

func reservedSet(fvs []fieldValue) bool {
	for _, fv := range fvs {
		if fv.f.Reserved() && fv.v.Uint() != 0 {
			return true
		}
	}
	return false
}

// traceMADsIfPresent returns the trace MADs for seeding, or none when the
// traces are missing: the fuzz target still runs on the encoder's seeds.
func traceMADsIfPresent(tb testing.TB) []traceMAD {
	tb.Helper()
	dir := filepath.Join(filepath.Dir(testenv.RepoRoot(tb)), "shared", "traces")
	files, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if len(files) == 0 {
		if testenv.InCI() {
			tb.Fatalf("rxe traces missing in %s (the repo root's ../shared/traces)", dir)
		}
		return nil
	}
	var out []traceMAD
	for _, path := range files {
		out = append(out, madsInPcap(tb, path)...)
	}
	return out
}
