package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// printer writes results in the format -o chose.
type printer struct {
	w      io.Writer
	format string
	docs   int // documents written, for YAML's separators
}

func (g *globals) printer() *printer { return &printer{w: g.env.stdout, format: g.output} }

// message writes m as JSON or YAML (for table output the caller prints
// rows instead); stream says one message of many (JSON on one line).
func (p *printer) message(m proto.Message, stream bool) error {
	opts := protojson.MarshalOptions{Multiline: !stream, Indent: "  "}
	b, err := opts.Marshal(m)
	if err != nil {
		return err
	}
	switch p.format {
	case "json":
		if stream {
			// protojson may add spaces at random; keep one line anyway.
			b = bytes.ReplaceAll(b, []byte("\n"), nil)
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	case "yaml":
		y, err := jsonToYAML(b)
		if err != nil {
			return err
		}
		if p.docs > 0 {
			if _, err := io.WriteString(p.w, "---\n"); err != nil {
				return err
			}
		}
		p.docs++
		_, err = p.w.Write(y)
		return err
	}
	return fmt.Errorf("output %q has no message form", p.format)
}

// structured reports whether the output is JSON or YAML.
func (p *printer) structured() bool { return p.format != "table" }

// done reports a call that returns nothing to show: res (the API's empty
// response) with -o json|yaml, else the line.
func (p *printer) done(res proto.Message, line string) error {
	if p.structured() {
		return p.message(res, false)
	}
	_, err := io.WriteString(p.w, line+"\n")
	return err
}

// pageFlags are the --page-size and --page-token flags of a list command
// that prints one page of names.
type pageFlags struct {
	size  int
	token string
}

// add adds the flags to cmd, which lists what (plural).
func (f *pageFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().IntVar(&f.size, "page-size", 0, what+" per page (0: 100)")
	cmd.Flags().StringVar(&f.token, "page-token", "", "continue after the page that gave this token")
}

// jsonToYAML re-encodes a JSON document as block-style YAML, keeping the
// order of its fields.
func jsonToYAML(b []byte) ([]byte, error) {
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	var clear func(*yaml.Node)
	clear = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			clear(c)
		}
	}
	clear(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// table writes rows under a header, aligned.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) {
	fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// ts formats a timestamp for a table: RFC 3339 in UTC, "-" when unset.
func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

// dur formats a duration for a table, "-" when unset.
func dur(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return d.AsDuration().String()
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tsFmt is ts for a table column.
func tsFmt(t *timestamppb.Timestamp) string { return ts(t) }

func boolStr(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
