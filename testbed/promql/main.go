// Command promql-names parses PromQL expressions with Prometheus' own parser and prints the
// metric names each one selects, so caplv's chart tests can check the dashboard and alert
// expressions against a running manager's /metrics.
//
// Input (stdin): a JSON array of expressions. Output (stdout): a JSON array with, for each
// expression in order, the sorted metric names it reads. A parse error or a selector without a
// metric name exits 1, naming the expression.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fail("reading a JSON array of expressions from stdin: %v", err)
	}
	out := make([][]string, 0, len(exprs))
	for _, expr := range exprs {
		names, err := metricNames(expr)
		if err != nil {
			fail("%q: %v", expr, err)
		}
		out = append(out, names)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing the result: %v", err)
	}
}

// metricNames parses expr and returns the names of the metrics its selectors read.
func metricNames(expr string) ([]string, error) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var unnamed error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		selector, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := selector.Name
		for _, m := range selector.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			unnamed = fmt.Errorf("selector %s names no metric", selector)
			return nil
		}
		seen[name] = true
		return nil
	})
	if unnamed != nil {
		return nil, unnamed
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "promql-names: "+format+"\n", args...)
	os.Exit(1)
}
