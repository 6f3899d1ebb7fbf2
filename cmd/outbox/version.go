package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/siteline/outbox/cmd/outbox/internal/cli"
)

// buildVersion is what `outbox version` reports: the version, the module
// and the source revision the binary was built from, and the Go that built
// it.
type buildVersion struct {
	// Version is the one the binary reports elsewhere (the logs' version
	// key): -X main.version, else the module's, else dev-<revision>.
	Version string `json:"version"`
	// Module and ModuleVersion are the main module's path and version as
	// the build recorded them; "(devel)" for a build in a checkout.
	Module        string `json:"module"`
	ModuleVersion string `json:"module_version"`
	// Revision, Modified and Time are the version control state of the
	// checkout it was built in (vcs.revision, vcs.modified, vcs.time):
	// absent when built outside one or with -buildvcs=false. Modified says
	// the checkout had changes not committed.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified"`
	Time     string `json:"time,omitempty"`
	// Go is the Go version that built it; Platform its GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// readBuildVersion reads the binary's build information.
func readBuildVersion() buildVersion {
	v := buildVersion{Version: versionString(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module, v.ModuleVersion = bi.Main.Path, bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "vcs.time":
			v.Time = s.Value
		}
	}
	return v
}

// writeVersion is `outbox version [-json]`.
func writeVersion(args []string, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("outbox version", flag.ContinueOnError)
	set.SetOutput(stderr)
	asJSON := set.Bool("json", false, "print the build information as one JSON object")
	set.Usage = func() {
		fmt.Fprintf(stderr, "Usage: outbox version [-json]\n\n"+
			"Prints the version, the module and the source revision the binary was built from\n"+
			"(with \"modified\" when the checkout had uncommitted changes), the commit's time\n"+
			"and the Go version.\n\n")
		set.PrintDefaults()
	}
	if code, ok := cli.ParseArgs(set, args, 0); !ok {
		return code
	}
	v := readBuildVersion()
	if *asJSON {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "outbox version: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintf(stdout, "outbox %s (%s %s)\n", v.Version, v.Go, v.Platform)
	if v.Module != "" {
		fmt.Fprintf(stdout, "module:   %s %s\n", v.Module, v.ModuleVersion)
	}
	rev := v.Revision
	switch {
	case rev == "":
		rev = "unknown (built outside a checkout or with -buildvcs=false)"
	case v.Modified:
		rev += " (modified)"
	}
	fmt.Fprintf(stdout, "revision: %s\n", rev)
	if v.Time != "" {
		fmt.Fprintf(stdout, "time:     %s\n", v.Time)
	}
	return exitOK
}
