package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// clientVersion is jobctl's own version in the JSON form of
// jobkit.v1.GetVersionResponse, its server version named version.
type clientVersion struct {
	Version       string `json:"version"`
	EngineVersion string `json:"engineVersion"`
	APIVersion    string `json:"apiVersion"`
	GoVersion     string `json:"goVersion"`
}

func newVersionCmd(g *globals) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print jobctl's version and the server's",
		Long: "Print jobctl's version and that of the server --addr names (NodeService.GetVersion, role viewer):\n" +
			"the build, the job engine compiled in, the API spoken and the Go release. --client prints jobctl's alone, without a call.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cv := clientVersion{Version: buildVersion(), EngineVersion: job.Version, APIVersion: client.APIVersion, GoVersion: runtime.Version()}
			var sv *jobkitv1.GetVersionResponse
			if !clientOnly {
				err := g.call(cmd, func(ctx context.Context, c *client.Client) error {
					var err error
					sv, err = c.GetVersion(ctx)
					return err
				})
				if err != nil {
					return err
				}
			}
			pr := g.printer()
			if pr.structured() {
				return printVersions(pr, cv, sv)
			}
			t := newTable(pr.w, "", "VERSION", "ENGINE", "API", "GO")
			t.row("client", cv.Version, cv.EngineVersion, cv.APIVersion, cv.GoVersion)
			if sv != nil {
				t.row("server", orDash(sv.GetServerVersion()), orDash(sv.GetEngineVersion()), orDash(sv.GetApiVersion()), orDash(sv.GetGoVersion()))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if sv != nil && sv.GetApiVersion() != cv.APIVersion {
				_, err := fmt.Fprintf(g.env.stderr, "jobctl: the server speaks API %s, this jobctl %s; use a jobctl built for %s\n", sv.GetApiVersion(), cv.APIVersion, sv.GetApiVersion())
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print jobctl's version only; call no server")
	return cmd
}

// printVersions writes {"client": …, "server": …} as JSON or YAML; server
// is the GetVersionResponse in protobuf's JSON form, absent with --client.
func printVersions(pr *printer, cv clientVersion, sv *jobkitv1.GetVersionResponse) error {
	doc := struct {
		Client clientVersion   `json:"client"`
		Server json.RawMessage `json:"server,omitempty"`
	}{Client: cv}
	if sv != nil {
		b, err := protojson.Marshal(sv)
		if err != nil {
			return err
		}
		doc.Server = b
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if pr.format == "yaml" {
		y, err := jsonToYAML(b)
		if err != nil {
			return err
		}
		_, err = pr.w.Write(y)
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = pr.w.Write(out.Bytes())
	return err
}

// buildVersion is jobctl's module version when built from a tagged module
// (go install ...@v1.4.0), else job.Version: server.Version's rule, kept
// here so that jobctl does not link the server.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return job.Version
}
