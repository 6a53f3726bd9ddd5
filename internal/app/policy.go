package app

// capper policy check / diff: a policy change reviewed like code before it
// ships. Both read a policy document (the keys README "Caps" describes, at
// the top level) or a worker config (its capping section).

import (
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/policy"
)

// ErrPolicyProblems: a document has problems; they were printed.
var ErrPolicyProblems = errors.New("policy problems")

// readPolicy reads path as a policy document, or as a worker config when it
// has a kafka or capping section. Problems of the policy are returned, not
// an error: the caller prints them all.
func readPolicy(path string) (*policy.Document, policy.Problems, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read policy: %w", err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, nil, fmt.Errorf("read policy %s: %w", path, err)
	}
	_, kafka := top["kafka"]
	_, capping := top["capping"]
	if kafka || capping {
		cfg, err := config.Parse(data, os.Environ())
		if err != nil {
			return nil, nil, fmt.Errorf("worker config %s: %w", path, err)
		}
		d := cfg.Capping.Document
		return &d, nil, nil
	}
	d, err := policy.Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, d.Problems(), nil
}

// CheckPolicies checks each file and prints its verdict: "ok" with what it
// holds, or every problem with its field path. The error is
// ErrPolicyProblems when a file has any, after all were printed.
func CheckPolicies(w io.Writer, paths []string) error {
	bad := false
	for _, p := range paths {
		d, problems, err := readPolicy(p)
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", p, err)
			bad = true
			continue
		}
		if len(problems) > 0 {
			for _, pr := range problems {
				fmt.Fprintf(w, "%s: %s\n", p, pr.Error())
			}
			bad = true
			continue
		}
		limits := len(d.DefaultPolicy.Limits)
		for _, s := range d.Segments {
			limits += len(s.Limits)
		}
		fmt.Fprintf(w, "%s: ok (%d segment policies and default_policy, %d limits)\n", p, len(d.Segments), limits)
	}
	if bad {
		return ErrPolicyProblems
	}
	return nil
}

// DiffPolicies prints what changes from the policy in oldPath to the one in
// newPath, one line per change (policy.Diff), or that they decide alike.
// Both must check clean.
func DiffPolicies(w io.Writer, oldPath, newPath string) error {
	var docs [2]*policy.Document
	for i, p := range []string{oldPath, newPath} {
		d, problems, err := readPolicy(p)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s: %w (capper policy check lists them): %w", p, ErrPolicyProblems, problems.Err())
		}
		docs[i] = d
	}
	changes := policy.Diff(docs[0], docs[1])
	if len(changes) == 0 {
		fmt.Fprintln(w, "no change: both policies decide alike")
		return nil
	}
	for _, c := range changes {
		fmt.Fprintln(w, c)
	}
	return nil
}
