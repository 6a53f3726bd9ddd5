package docscheck

import (
	"reflect"
	"testing"
)

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Redis failures, NOSCRIPT, timeouts":            "redis-failures-noscript-timeouts",
		"Deferral's cost":                               "deferrals-cost",
		"What plans are worth: `capper replay --plans`": "what-plans-are-worth-capper-replay---plans",
		"3. Replay": "3-replay",
		"Upgrading from the first version (sorted sets)": "upgrading-from-the-first-version-sorted-sets",
		"See [the contract](event-contract.md) **now**":  "see-the-contract-now",
		"key_prefix and `worker.batch_size`":             "key_prefix-and-workerbatch_size",
		"The record layout: Redis keys and memory":       "the-record-layout-redis-keys-and-memory",
		"Send-intents": "send-intents",
		"Two  spaces":  "two--spaces",
		"Un café":      "un-café",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	p := Parse("x.md", "# T\n\n<!-- check: policy -->\n\n```yaml\na: 1\n# not a heading\n```\n\n- item\n\n  <!-- check: none (why) -->\n  ```json\n  {}\n  ```\n\n```sh\ncapper version\n```\n\n## T\n")
	want := []Block{
		{Line: 5, Lang: "yaml", Marker: "policy", Text: "a: 1\n# not a heading\n"},
		{Line: 13, Lang: "json", Marker: "none (why)", Text: "{}\n"},
		{Line: 17, Lang: "sh", Text: "capper version\n"},
	}
	if !reflect.DeepEqual(p.Blocks, want) {
		t.Errorf("blocks %+v, want %+v", p.Blocks, want)
	}
	if got := p.Headings(); !reflect.DeepEqual(got, []string{"T", "T"}) {
		t.Errorf("headings %q", got)
	}
	if a := p.Anchors(); !a["t"] || !a["t-1"] || len(a) != 2 {
		t.Errorf("anchors %v", a)
	}
}

func TestParseMarker(t *testing.T) {
	for in, want := range map[string]Marker{
		"policy": {Kind: "policy"},
		"config, invalid: worker.batch_size: must be": {Kind: "config", Invalid: "worker.batch_size: must be"},
		"none (a Helm values file)":                   {Kind: "none", Why: "a Helm values file"},
	} {
		got, err := ParseMarker(in)
		if err != nil || got != want {
			t.Errorf("ParseMarker(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"none", "none ()", "Policy", "policy invalid", ""} {
		if _, err := ParseMarker(bad); err == nil {
			t.Errorf("ParseMarker(%q) accepted", bad)
		}
	}
}

func TestCommands(t *testing.T) {
	pages := []*Page{Parse("x.md", "```sh\n"+
		"capper check-config --config capper.yaml   # validates\n"+
		"CAPPER_LOG_LEVEL=debug capper run --config 'my config.yaml'\n"+
		"source <(capper completion bash)\n"+
		"capper completion zsh > \"${fpath[1]}/_capper\"\n"+
		"capper replay --policy p.yaml \\\n    --from x.jsonl 2>&1 | tee out.txt\n"+
		"echo $(capper version) && go run ./cmd/capper inspect --config c.yaml --user 1\n"+
		"docker run --rm capper:v1 version\n"+
		"```\n\n```console\n$ capper version\ncapper v1.0.0 (go1.26.8)\n```\n\n```text\ncapper --nonsense\n```\n")}
	got, err := Commands(pages, "capper")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"check-config", "--config", "capper.yaml"},
		{"run", "--config", "my config.yaml"},
		{"completion", "bash"},
		{"completion", "zsh"},
		{"replay", "--policy", "p.yaml", "--from", "x.jsonl"},
		{"version"},
		{"inspect", "--config", "c.yaml", "--user", "1"},
		{"version"},
	}
	var args [][]string
	for _, c := range got {
		args = append(args, c.Args)
	}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("commands %q, want %q", args, want)
	}
	if got[4].Where != "x.md:6" || got[7].Where != "x.md:13" {
		t.Errorf("where: %s, %s", got[4].Where, got[7].Where)
	}
	if _, err := Commands([]*Page{Parse("y.md", "```sh\ncapper run --config 'x\n```\n")}, "capper"); err == nil {
		t.Error("an unterminated quote is not reported")
	}
}
