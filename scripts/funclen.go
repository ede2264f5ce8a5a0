//go:build ignore

// funclen lists the functions longer than a limit, by lines from the
// func keyword to the closing brace, in the Go files under the
// directories given (default "."), leaving out tests (-tests to include
// them), generated files and testdata. It prints "lines file:line name"
// per function, longest first, and exits 1 when it printed any.
//
//	go run scripts/funclen.go -over 100 .
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type fn struct {
	lines int
	pos   string
	name  string
}

func main() {
	over := flag.Int("over", 100, "report functions with more lines than this")
	tests := flag.Bool("tests", false, "include _test.go files")
	flag.Parse()
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var found []fn
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				n := d.Name()
				if path != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || (!*tests && strings.HasSuffix(path, "_test.go")) {
				return nil
			}
			fs, err := scan(path, *over)
			found = append(found, fs...)
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	for _, f := range found {
		fmt.Printf("%d %s %s\n", f.lines, f.pos, f.name)
	}
	if len(found) > 0 {
		os.Exit(1)
	}
}

func scan(path string, over int) ([]fn, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if generated(src) {
		return nil, nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return nil, err
	}
	var out []fn
	ast.Inspect(f, func(n ast.Node) bool {
		var name string
		var body *ast.BlockStmt
		switch x := n.(type) {
		case *ast.FuncDecl:
			name, body = x.Name.Name, x.Body
			if x.Recv != nil && len(x.Recv.List) > 0 {
				name = "(" + types(x.Recv.List[0].Type) + ")." + name
			}
		case *ast.FuncLit:
			name, body = "func literal", x.Body
		}
		if body == nil {
			return true
		}
		start, end := fset.Position(n.Pos()), fset.Position(body.Rbrace)
		if l := end.Line - start.Line + 1; l > over {
			out = append(out, fn{l, fmt.Sprintf("%s:%d", path, start.Line), name})
		}
		return true
	})
	return out, nil
}

func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + types(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return types(x.X)
	case *ast.IndexListExpr:
		return types(x.X)
	}
	return "?"
}

// generated reports the standard "Code generated ... DO NOT EDIT." line.
func generated(src []byte) bool {
	for _, line := range bytes.Split(src, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("package ")) {
			return false
		}
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.HasSuffix(bytes.TrimSpace(line), []byte("DO NOT EDIT.")) {
			return true
		}
	}
	return false
}
