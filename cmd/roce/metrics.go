package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/verbs"
)

// The Prometheus exporter. Every command takes --metrics-addr ADDR: while
// the command runs, http://ADDR/metrics serves the counters of every device
// running in the runtime directory, this process's and others', read at
// each scrape through the devices' control sockets (so a long-running
// command such as roce pingpong exports its own device without any code of
// its own). `roce metrics` is the exporter alone, until interrupted.

// scrapeTimeout bounds the control-socket round trip per device per scrape.
const scrapeTimeout = 3 * time.Second

// addMetricsFlag gives root the persistent --metrics-addr flag and starts
// and stops the exporter around whichever command runs.
func addMetricsFlag(root *cobra.Command) {
	root.PersistentFlags().String("metrics-addr", "",
		"serve Prometheus metrics at http://`ADDR`/metrics while the command runs (e.g. :9464, 127.0.0.1:0)")
	var stop func()
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		addr, _ := cmd.Flags().GetString("metrics-addr")
		if addr == "" {
			return nil
		}
		reg, _ := registryOf(cmd)
		var err error
		stop, err = serveMetrics(cmd, reg, addr)
		return err
	}
	root.PersistentPostRun = func(cmd *cobra.Command, args []string) {
		if stop != nil {
			stop()
			stop = nil
		}
	}
}

// serveMetrics listens on addr and serves /metrics until stop is called.
func serveMetrics(cmd *cobra.Command, reg *host.Registry, addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, opError("--metrics-addr", err)
	}
	pr := prometheus.NewRegistry()
	pr.MustRegister(&exporter{reg: reg}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(pr, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	fmt.Fprintf(cmd.ErrOrStderr(), "roce: serving metrics at http://%s/metrics\n", ln.Addr())
	return func() {
		srv.Close()
		<-done
	}, nil
}

func newMetricsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "metrics --metrics-addr ADDR",
		Short: "a Prometheus exporter of every running device's counters",
		Long: `metrics serves Prometheus metrics at http://ADDR/metrics until interrupted:
each running device's port counters, one family per counter named after roce
stat's (each HELP says what it counts, and whether rxe has the counter), drops
by cause including the link's, link packets and bytes, QPs by state, and the
RDMA CM events counted on the device. Any other command serves the same while
it runs when given --metrics-addr.

` + metricsHelp(),
		Example: `  roce metrics --metrics-addr :9464
  roce pingpong -d rxe0 -g 1 --metrics-addr 127.0.0.1:9464`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if addr, _ := cmd.Flags().GetString("metrics-addr"); addr == "" {
				return usageError{errors.New("--metrics-addr ADDR is required")}
			}
			ctx, start := commandContext(cmd), time.Now()
			<-ctx.Done()
			return interruptedAfter(ctx, "after serving metrics for %v", time.Since(start).Round(time.Second))
		},
	}
	// The root's --metrics-addr, shown among this command's own flags,
	// where its help lists what it needs.
	cmd.Flags().String("metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics (required; e.g. :9464, 127.0.0.1:0)")
	return cmd
}

// exporter collects at each scrape from every device's owner.
type exporter struct {
	reg *host.Registry
}

var (
	labelsPort = []string{"device", "port"}
	descUp     = prometheus.NewDesc("goroce_device_running", "1 if a process runs the device's data path and answered on its control socket, else 0.", []string{"device"}, nil)
	descDrops  = prometheus.NewDesc("goroce_port_drops_total", "Packets dropped, by cause.", append(labelsPort, "cause"), nil)
	descLink   = prometheus.NewDesc("goroce_port_link_packets_total", "Packets the link carried, by direction.", append(labelsPort, "direction"), nil)
	descBytes  = prometheus.NewDesc("goroce_port_link_bytes_total", "Bytes the link carried, by direction.", append(labelsPort, "direction"), nil)
	descQPs    = prometheus.NewDesc("goroce_qps", "Queue pairs, by type and state.", []string{"device", "type", "state"}, nil)
	descCM     = prometheus.NewDesc("goroce_cm_events_total", "RDMA CM events on the device, by event.", []string{"device", "event"}, nil)
	descPort   = portDescs()
)

// dropCauses maps the counters and link counters that count drops to the
// cause label they get (the tables' Drop). v1Only marks a link counter only
// a v1-only port has: the other devices do not export it.
var dropCauses = func() (d []dropCause) {
	for _, c := range verbs.CounterTable {
		if c.Drop != "" {
			d = append(d, dropCause{counter: c.Name, cause: c.Drop})
		}
	}
	for _, c := range link.StatTable {
		if c.Drop != "" {
			d = append(d, dropCause{link: c.Name, cause: c.Drop})
		}
	}
	for _, c := range afpacket.CounterTable { // RoCE v2 to a v1-only port
		if c.Drop != "" {
			d = append(d, dropCause{link: c.Name, cause: c.Drop, v1Only: true})
		}
	}
	return d
}()

// metricsHelp lists the exporter's counter families and drop causes, from
// the tables it exports (verbs.CounterTable, dropCauses).
func metricsHelp() string {
	var b strings.Builder
	b.WriteString("Port counters (roce stat --help says what each counts):\n")
	var names []string
	for _, c := range verbs.CounterTable {
		names = append(names, "goroce_port_"+c.Name+"_total")
	}
	writeWrapped(&b, "  ", strings.Join(names, " "), 80)
	b.WriteString("\n" + "Drops, goroce_port_drops_total{cause}, by cause:\n")
	var causes []string
	for _, d := range dropCauses {
		causes = append(causes, d.cause)
	}
	writeWrapped(&b, "  ", strings.Join(causes, " "), 80)
	b.WriteString("\n" + "And goroce_device_running, goroce_port_link_packets_total{direction},\n" +
		"goroce_port_link_bytes_total{direction}, goroce_qps{type,state},\n" +
		"goroce_cm_events_total{event}.")
	return b.String()
}

type dropCause struct {
	counter, link, cause string
	v1Only               bool
}

// portDescs has one counter family per transport counter, named after it:
// goroce_port_sent_pkts_total ... Each HELP says what it counts
// (verbs.CounterTable) and whether rxe (drivers/infiniband/sw/rxe/
// rxe_hw_counters.c) has the counter or only goroce does.
func portDescs() map[string]*prometheus.Desc {
	m := make(map[string]*prometheus.Desc, len(verbs.CounterTable))
	for _, c := range verbs.CounterTable {
		help := "goroce's " + c.Name + " counter (rxe has none; roce stat shows it): " + c.Help + "."
		if c.Rxe {
			help = "The port's " + c.Name + " counter, as rxe's hw_counters name it: " + c.Help + "."
		}
		m[c.Name] = prometheus.NewDesc("goroce_port_"+c.Name+"_total", help, labelsPort, nil)
	}
	return m
}

// Describe sends nothing: the exporter is unchecked, its devices come and go.
func (e *exporter) Describe(chan<- *prometheus.Desc) {}

func (e *exporter) Collect(ch chan<- prometheus.Metric) {
	defs, err := e.reg.List()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descUp, err)
		return
	}
	for _, def := range defs {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		rep, err := e.reg.Counters(ctx, def.Name)
		cancel()
		if err != nil {
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0, def.Name)
			if !errors.Is(err, host.ErrNotRunning) {
				ch <- prometheus.NewInvalidMetric(descUp, err)
			}
			continue
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1, def.Name)
		collectPort(ch, rep)
	}
}

func collectPort(ch chan<- prometheus.Metric, rep *host.CounterReport) {
	dev, port := rep.Device, fmt.Sprint(rep.Port)
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{dev, port}, labels...)...)
	}
	for _, n := range verbs.CounterNames {
		counter(descPort[n], rep.Counters[n])
	}
	for _, c := range dropCauses {
		switch v, ok := rep.Link[c.link]; {
		case c.counter != "":
			counter(descDrops, rep.Counters[c.counter], c.cause)
		case ok || !c.v1Only:
			counter(descDrops, v, c.cause)
		}
	}
	counter(descLink, rep.Link["tx_packets"], "tx")
	counter(descLink, rep.Link["rx_packets"], "rx")
	counter(descBytes, rep.Link["tx_bytes"], "tx")
	counter(descBytes, rep.Link["rx_bytes"], "rx")
	qps := map[[2]string]int{}
	for _, q := range rep.QPs {
		qps[[2]string{q.Type, q.State}]++
	}
	for k, n := range qps {
		ch <- prometheus.MustNewConstMetric(descQPs, prometheus.GaugeValue, float64(n), dev, k[0], k[1])
	}
	for ev, n := range rep.CMEvents {
		ch <- prometheus.MustNewConstMetric(descCM, prometheus.CounterValue, float64(n), dev, strings.TrimSpace(ev))
	}
}
