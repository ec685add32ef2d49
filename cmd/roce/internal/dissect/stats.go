package dissect

import (
	"errors"
	"strconv"
	"strings"

	"github.com/goroce/goroce/wire"
)

// Stats counts the frames of one capture by what Decode made of them.
type Stats struct {
	Frames     int // every frame
	RoCE       int // RoCE packets that parsed
	ICRCOK     int // ... whose ICRC matched
	ICRCBad    int // ... whose ICRC did not
	Problems   int // ... with any problem (see Packet.Problems), ICRC included
	OtherBad   int // ... with a problem other than the ICRC
	Malformed  int // frames that look like RoCE but do not parse, or are RoCE with a corrupted selector (CorruptedError)
	Other      int // frames that are not RoCE, skipped
	OtherIPBad int // ... whose IP header is damaged (SkippedError)
}

// Add counts one frame: Decode's result err and, when err is nil, the packet.
func (s *Stats) Add(p *Packet, err error) {
	s.Frames++
	switch {
	case errors.Is(err, wire.ErrNotRoCE):
		s.Other++
		var se *SkippedError
		if errors.As(err, &se) {
			s.OtherIPBad++
		}
	case err != nil:
		s.Malformed++
	default:
		s.RoCE++
		if p.ICRCOK() {
			s.ICRCOK++
		} else {
			s.ICRCBad++
		}
		probs := len(p.Problems())
		if probs > 0 {
			s.Problems++
		}
		if !p.ICRCOK() {
			probs--
		}
		if probs > 0 {
			s.OtherBad++
		}
	}
}

// Failed returns the number of frames that fail a check: RoCE frames that
// are malformed or have a problem, and skipped frames with a damaged IP
// header. It is what makes roce decode --verify fail.
func (s *Stats) Failed() int { return s.Malformed + s.Problems + s.OtherIPBad }

// String summarises the counts: "52 RoCE packets (52 ICRC ok), 4 other
// frames skipped".
func (s *Stats) String() string {
	var b strings.Builder
	b.WriteString(plural(s.RoCE, "RoCE packet", "RoCE packets"))
	b.WriteString(" (" + strconv.Itoa(s.ICRCOK) + " ICRC ok")
	if s.ICRCBad > 0 {
		b.WriteString(", " + strconv.Itoa(s.ICRCBad) + " ICRC WRONG")
	}
	if s.OtherBad > 0 {
		b.WriteString(", " + strconv.Itoa(s.OtherBad) + " with other problems")
	}
	b.WriteString(")")
	if s.Malformed > 0 {
		b.WriteString(", " + plural(s.Malformed, "malformed RoCE frame", "malformed RoCE frames"))
	}
	b.WriteString(", " + plural(s.Other, "other frame", "other frames") + " skipped")
	if s.OtherIPBad > 0 {
		b.WriteString(" (" + strconv.Itoa(s.OtherIPBad) + " with a damaged IP header)")
	}
	return b.String()
}
