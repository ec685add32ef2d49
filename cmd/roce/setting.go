package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/wire"
)

// What roce mode and roce tos share beyond goroce's own devices: --kernel,
// --persist and -j.

func addSettingFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	addKernelFlag(cmd)
	f.Bool("persist", false, "kernel devices: also write what sets the value again at boot (a udev rule, or a systemd unit); "+
		"--persist=false removes it")
	f.String("persist-root", "/", "with --persist: the root `DIR` of the filesystem the rule or unit goes into")
	f.String("persist-exe", "", "with --persist: the roce `PATH` the rule or unit runs (default: this executable)")
	f.BoolVarP(new(bool), "json", "j", false, "print a JSON array of one object")
}

// goroceNoPersist refuses --persist for goroce's devices: they live in the
// runtime directory and are gone after a reboot, settings and all.
func goroceNoPersist(cmd *cobra.Command, op string) error {
	if !cmd.Flags().Changed("persist") {
		return nil
	}
	_, dir := registryOf(cmd)
	return &errnoError{op: op, errno: syscall.EINVAL,
		detail: fmt.Sprintf("--persist is for the kernel's devices: goroce's live in %s and are gone after a reboot with their settings; "+
			"make them and set their modes again where goroce is started", dir)}
}

// printSetting prints the value as cma_roce_mode and cma_roce_tos do (the
// attribute's content), or as JSON with -j.
func printSetting(cmd *cobra.Command, p portFlags, attr, text string, value any, isKernel bool) error {
	if j, _ := cmd.Flags().GetBool("json"); j {
		out := bufio.NewWriter(cmd.OutOrStdout())
		defer out.Flush()
		return writeJSONRows(out, []jsonRow{{{"ifname", p.device}, {"port", p.port}, {attr, value}, {"kernel", isKernel}}})
	}
	_, err := fmt.Fprint(cmd.OutOrStdout(), text)
	return err
}

func kernelMode(cmd *cobra.Command, p portFlags, set bool, m wire.Version) error {
	c := configfsOf(cmd, "mode")
	var (
		got wire.Version
		err error
	)
	if set {
		got, err = c.SetMode(p.device, p.port, m)
	} else {
		got, err = c.Mode(p.device, p.port)
	}
	if err != nil {
		return kernelErr("mode", err)
	}
	flag := "2"
	if got == wire.RoCEv1 {
		flag = "1"
	}
	if err := persist(cmd, "mode", kernel.Setting{Dev: p.device, Port: p.port, Attr: kernel.AttrMode, Value: flag}); err != nil {
		return err
	}
	return printSetting(cmd, p, config.AttrMode, config.FormatMode(got), config.ModeName(got), true)
}

func kernelTOS(cmd *cobra.Command, p portFlags, set bool, v uint8) error {
	c := configfsOf(cmd, "tos")
	var (
		got uint8
		err error
	)
	if set {
		got, err = c.SetTOS(p.device, p.port, v)
	} else {
		got, err = c.TOS(p.device, p.port)
	}
	if err != nil {
		return kernelErr("tos", err)
	}
	if err := persist(cmd, "tos", kernel.Setting{Dev: p.device, Port: p.port, Attr: kernel.AttrTOS, Value: strconv.Itoa(int(got))}); err != nil {
		return err
	}
	return printSetting(cmd, p, config.AttrTOS, config.FormatTOS(got), got, true)
}

// persist does what --persist asks for s: it shows the rule or unit on
// stderr, then writes it (nothing if it is in place already), or, with
// --persist=false, removes it. Without udev or systemd it fails, saying
// what to run at boot instead.
func persist(cmd *cobra.Command, op string, s kernel.Setting) error {
	f := cmd.Flags().Lookup("persist")
	if f == nil || !f.Changed {
		return nil
	}
	root, _ := cmd.Flags().GetString("persist-root")
	exe, _ := cmd.Flags().GetString("persist-exe")
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return opError(op, fmt.Errorf("finding this executable for the rule: %w", err))
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
	}
	ps := kernel.Persist{Root: root, Exe: exe}
	w := cmd.ErrOrStderr()
	if f.Value.String() == "false" {
		removed, err := ps.Remove(s)
		for _, r := range removed {
			fmt.Fprintf(w, "roce: %s: removed %s\n", op, r)
		}
		if err != nil {
			return kernelErr(op, err)
		}
		if len(removed) == 0 {
			fmt.Fprintf(w, "roce: %s: nothing to remove: no rule or unit of %s port %d's %s under %s\n", op, s.Dev, s.Port, s.Attr, root)
		}
		return nil
	}
	pl, err := ps.Plan(s)
	if err != nil {
		return kernelErr(op, err)
	}
	if pl.Kind == kernel.KindNone {
		return &errnoError{op: op, errno: syscall.ENOTSUP, detail: "--persist: " + pl.Manual}
	}
	for _, file := range pl.Files {
		if file.Link != "" {
			fmt.Fprintf(w, "roce: %s: --persist: %s -> %s (what systemctl enable makes)\n", op, file.Path, file.Link)
			continue
		}
		fmt.Fprintf(w, "roce: %s: --persist: a %s sets the value again at boot, %s:\n%s", op, pl.Kind, file.Path, file.Content)
	}
	changed, err := ps.Apply(pl)
	if err != nil {
		return kernelErr(op, err)
	}
	if len(changed) == 0 {
		fmt.Fprintf(w, "roce: %s: --persist: already in place, nothing written\n", op)
	} else {
		fmt.Fprintf(w, "roce: %s: --persist: written\n", op)
	}
	return nil
}
