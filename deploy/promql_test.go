package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// promqlWords are PromQL's functions, aggregations and keywords: every
// identifier that is not a metric name. An identifier called like a function
// that is not listed here is reported, so a misspelt function fails too.
var promqlWords = func() map[string]bool {
	words := map[string]bool{}
	for _, w := range append(slices.Clone(promqlFunctions), promqlKeywords...) {
		words[w] = true
	}
	return words
}()

var promqlFunctions = strings.Fields(`
	abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max
	clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv
	double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
	histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate label_join
	label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
	predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort
	sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh
	time timestamp vector year
	sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`)

var promqlKeywords = strings.Fields(`and or unless bool offset atan2 inf nan start end
	by without on ignoring group_left group_right`)

// labelListKeywords are followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// metricNames returns the metric names a PromQL expression selects, in
// order. It skips label matchers ({...}), ranges and subqueries ([...]),
// strings, label lists after by/without/on/ignoring/group_*, numbers and
// durations, and Grafana variables ($x, ${x}). It is a scanner, not a parser:
// enough to find every series selector in the expressions we write.
func metricNames(expr string) ([]string, error) {
	var names []string
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipGroup(s, i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipGroup(s, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				j, err := skipGroup(s, i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
			}
			for i < len(s) && isIdent(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9'):
			// Numbers, 1e3, 0x1f and durations such as 1d or 5m30s.
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
				k++
			}
			followedByParen := k < len(s) && s[k] == '('
			switch {
			case labelListKeywords[word] && followedByParen:
				end, err := skipGroup(s, k, '(', ')')
				if err != nil {
					return nil, err
				}
				j = end
			case promqlWords[word]:
			case followedByParen:
				return nil, fmt.Errorf("unknown function %q", word)
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

// skipGroup returns the index after the group opened at i, minding strings
// and nesting.
func skipGroup(s string, i int, open, close byte) (int, error) {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unclosed %c at offset %d", open, i)
}

// balanced checks that (), {} and [] pair up outside strings.
func balanced(expr string) error {
	var stack []byte
	pairs := map[byte]byte{')': '(', '}': '{', ']': '['}
	for i := 0; i < len(expr); i++ {
		switch c := expr[i]; c {
		case '"', '\'', '`':
			end, err := skipString(expr, i)
			if err != nil {
				return err
			}
			i = end - 1
		case '(', '{', '[':
			stack = append(stack, c)
		case ')', '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				return fmt.Errorf("unbalanced %c at offset %d", c, i)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %c", stack[len(stack)-1])
	}
	return nil
}

// labelValuesRE matches Grafana's label_values(expr, label) variable query.
var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// grafanaQueryNames is metricNames for a Grafana variable query, which may
// wrap a selector in label_values.
func grafanaQueryNames(q string) ([]string, error) {
	if g := labelValuesRE.FindStringSubmatch(q); g != nil {
		return metricNames(g[1])
	}
	return metricNames(q)
}

// registry is what a running capper worker registers: every metric family
// name, and the type of those it exposes.
type registry struct {
	families map[string]bool
	types    map[string]string // from Gather: only families with series
}

// resolve maps a selected series name to its family: histogram and summary
// series (_bucket, _sum, _count) belong to the family without the suffix.
// It returns "" when no family exports the name.
func (r registry) resolve(name string) string {
	if r.families[name] {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok || !r.families[base] {
			continue
		}
		if typ := r.types[base]; typ == "HISTOGRAM" || (typ == "SUMMARY" && suffix != "_bucket") {
			return base
		}
	}
	return ""
}

// scrapeSeries are the series Prometheus itself writes for every scrape
// target (no worker exports them); alerts on the workers' presence select
// them.
var scrapeSeries = map[string]bool{"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true}

// unknownMetrics lists the metric names in expr that the registry does not
// export (nor Prometheus for every target), or explains why expr could not be
// read.
func (r registry) unknownMetrics(expr string, names func(string) ([]string, error)) ([]string, error) {
	if err := balanced(expr); err != nil {
		return nil, err
	}
	ns, err := names(expr)
	if err != nil {
		return nil, err
	}
	if len(ns) == 0 {
		return nil, fmt.Errorf("selects no metric")
	}
	var unknown []string
	for _, n := range ns {
		if r.resolve(n) == "" && !scrapeSeries[n] {
			unknown = append(unknown, n)
		}
	}
	return unknown, nil
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  string
	}{
		{`sum by (outcome) (rate(capper_intents_total{namespace=~"$namespace", job=~"$job"}[$__rate_interval]))`,
			[]string{"capper_intents_total"}, ""},
		{`histogram_quantile(0.99, sum by (le) (rate(capper_decision_duration_seconds_bucket{a="}{[", b='x'}[5m])))`,
			[]string{"capper_decision_duration_seconds_bucket"}, ""},
		{"(\n  sum by (segment) (rate(a_total{x=\"1\"}[1h] offset 1d))\n) - on (segment) group_left (foo) b > 0.2\nand on (segment) sum(c) without (le) > 1e3",
			[]string{"a_total", "b", "c"}, ""},
		{`time() - max by (pod) (capper_snapshot_last_check_timestamp_seconds)`, []string{"capper_snapshot_last_check_timestamp_seconds"}, ""},
		{`sum(rate(x[5m:30s])) / ignoring(pod) y_count > bool 0`, []string{"x", "y_count"}, ""},
		{`absent(up{job="capper",namespace="a"} == 1)`, []string{"up"}, ""},
		{`rat(capper_intents_total[5m])`, nil, `unknown function "rat"`},
		{`sum(capper_intents_total{job="x}`, nil, "unterminated string"},
	} {
		got, err := metricNames(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("metricNames(%q) error %v, want %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
	if got, err := grafanaQueryNames(`label_values(capper_intents_total{namespace=~"$namespace"}, job)`); err != nil || !slices.Equal(got, []string{"capper_intents_total"}) {
		t.Errorf("label_values query: %v, %v", got, err)
	}
}

func TestRegistryResolve(t *testing.T) {
	r := registry{
		families: map[string]bool{"h_seconds": true, "s_seconds": true, "c_total": true, "g": true},
		types:    map[string]string{"h_seconds": "HISTOGRAM", "s_seconds": "SUMMARY", "c_total": "COUNTER"},
	}
	for name, want := range map[string]string{
		"h_seconds_bucket": "h_seconds", "h_seconds_count": "h_seconds", "s_seconds_sum": "s_seconds",
		"s_seconds_bucket": "", "c_total": "c_total", "c_total_count": "", "g": "g", "g_sum": "", "c_totl": "",
	} {
		if got := r.resolve(name); got != want {
			t.Errorf("resolve(%s) = %q, want %q", name, got, want)
		}
	}
}
