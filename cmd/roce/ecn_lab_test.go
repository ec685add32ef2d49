package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
)

// TestLabECN is issue 16's interop check: goroce with DCQCN on (NP and RP)
// against Linux rxe, which has neither, through labRouted's router R.
// R's nft marks CE on every RoCE v2 packet rxe sends toward goroce, so
// goroce's NP answers them with CNPs (opcode 0x81) to rxe's QP, and on
// goroce's ECN-capable packets toward rxe, so rxe receives CE marks too.
// An RC pingpong (ibv_rc_pingpong in the VM, roce pingpong here) must
// complete with its data, R must have counted both the CE marks and the
// CNPs, and rxe's counters must stay clean (lab.CheckRxeCounters: no
// sequence errors, no retries exceeded, no duplicates beyond goroce's
// retransmissions): rxe drops CNPs and ignores ECN, and the connection
// never notices.
func TestLabECN(t *testing.T) {
	l := lab.Start(t)
	vm := lab.VM1
	l.Exec(vm, "killall ibv_rc_pingpong 2>/dev/null; true")
	a, r := labRouted(t, l)
	dir, roceBin := t.TempDir(), roceExecutable(t)
	for _, args := range [][]string{
		{"link", "add", "rxe0", "type", "rxe", "netdev", "rt-a0"},
		{"ecn", "-d", "rxe0", "np", "enable", "1"},
		{"ecn", "-d", "rxe0", "rp", "enable", "1"},
	} {
		if code, _, stderr := roceIn(t, a, dir, args...); code != 0 {
			t.Fatalf("roce %v: %s", args, stderr)
		}
	}
	// R: CE on rxe's packets toward goroce (Not-ECT: rxe claims no ECN
	// capability, and a real switch would not mark them; here the marks
	// are what makes goroce's NP speak), CE on goroce's ECT packets
	// toward rxe, and a count of the CNPs (UDP 4791, BTH opcode 0x81).
	rules := fmt.Sprintf(`table inet goroce_ecn_lab {
	chain ce {
		type filter hook forward priority filter; policy accept;
		oifname %q udp dport 4791 ip ecn set ce counter
		oifname %q udp dport 4791 ip ecn ect0 ip ecn set ce counter
		oifname %q udp dport 4791 @th,64,8 0x81 counter
	}
}
`, r.A.Ifname, r.B.Ifname, r.B.Ifname)
	err := r.Do(func() error {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		testenv.Require(t, !strings.Contains(err.Error(), "executable file not found"), "nft (apt-get install nftables)")
		t.Fatal(err)
	}
	before := l.Counters(t, vm)
	gTheirs := l.GIDIndex(t, vm, vm.IPv4)
	gOurs := gidIndexOf(t, dir, "rxe0", a.IPv4)
	const iters = 200
	// goroce's counters, written when its pingpong closes the device:
	// rxe's duplicates are judged against its retransmissions.
	stats := filepath.Join(dir, "pingpong.stats")
	t.Setenv(envStats, stats)
	job := l.Background(t, vm, "/tmp/ecnpp.log", 150*time.Second, fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n %d -s 4096 -p 18598", gTheirs, iters))
	var cli *proc
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	err = lab.UntilListening(ctx, job, "Couldn't connect", func() error {
		cli = startRoce(t, a, dir, roceBin, "pingpong", "-d", "rxe0", "-g", strconv.Itoa(gOurs), "-n", strconv.Itoa(iters), "-s", "4096", "-p", "18598", vm.IPv4)
		if code := cli.exitWithin(t, 2*time.Minute); code != 0 {
			return fmt.Errorf("exit %d: %s", code, cli.stderr.String())
		}
		return nil
	})
	if err != nil {
		vmlog, _, _ := l.Exec(vm, "cat /tmp/ecnpp.log")
		t.Fatalf("roce pingpong with DCQCN on: %v\n%s\nvm1: %s", err, cli.stdout.String(), vmlog)
	}
	if log := job.Wait(); !strings.Contains(log, "EXIT 0") {
		t.Fatalf("ibv_rc_pingpong:\n%s", log)
	}
	var ruleset string
	r.Do(func() error {
		out, err := exec.Command("nft", "list", "table", "inet", "goroce_ecn_lab").CombinedOutput()
		ruleset = string(out)
		return err
	})
	counts := regexp.MustCompile(`counter packets (\d+)`).FindAllStringSubmatch(ruleset, -1)
	if len(counts) != 3 {
		t.Fatalf("R's rules:\n%s", ruleset)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(counts[i][1], 10, 64); return v }
	t.Logf("R marked %d of rxe's packets and %d of goroce's CE; goroce sent rxe %d CNPs", n(0), n(1), n(2))
	if n(0) == 0 || n(1) == 0 || n(2) == 0 {
		t.Errorf("R's counters %d, %d, %d: want CE marks both ways and CNPs toward rxe:\n%s", n(0), n(1), n(2), ruleset)
	}
	// A duplicate at rxe is fine where goroce retransmitted (a TCG VM on
	// a loaded host answers later than the ACK timeout now and then: rxe's
	// own timer fires 6-17 times a run here), not otherwise.
	ours, err := readStatsFile(stats)
	if err != nil {
		t.Fatal(err)
	}
	l.CheckRxeCounters(t, vm, before, ours)
}
