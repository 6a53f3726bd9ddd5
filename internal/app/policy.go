package app

// capper policy check / diff / publish / history: a policy change reviewed
// like code before it ships. check and diff read a policy document or a
// worker config (config.ReadPolicy); publish and history work on a policy
// store (package policy).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/problems"
)

// ErrPolicyProblems: a document has problems; they were printed.
var ErrPolicyProblems = errors.New("policy problems")

// CheckPolicies checks each file and prints its verdict: "ok" with what it
// holds (then one line per budget: its rate, burst, what it covers and its
// lanes), or every problem with its file, line and field path; a worker
// config's also with what the policy needs of it (config.PolicyNeeds).
// The error is ErrPolicyProblems when a file has any, after all were
// printed.
func CheckPolicies(w io.Writer, paths []string) error {
	bad := false
	for _, p := range paths {
		r, err := config.ReadPolicyAt(p)
		if err != nil {
			fmt.Fprintln(w, err) // it names the file
			bad = true
			continue
		}
		var needs problems.List
		if r.Config != nil && r.Document != nil {
			needs = r.Config.PolicyNeeds(r.Document)
		}
		for _, pr := range needs {
			fmt.Fprintf(w, "%s: %s\n", p, pr.Error())
		}
		for _, pr := range r.Problems {
			fmt.Fprintf(w, "%s: %s\n", cmp.Or(r.File, p), pr.Error())
		}
		if len(needs)+len(r.Problems) > 0 {
			bad = true
			continue
		}
		d := r.Document
		limits := len(d.DefaultPolicy.Limits)
		for _, s := range d.Segments {
			limits += len(s.Limits)
		}
		budgets := ""
		switch n := len(d.Budgets); {
		case n == 1:
			budgets = ", 1 budget"
		case n > 1:
			budgets = fmt.Sprintf(", %d budgets", n)
		}
		fmt.Fprintf(w, "%s: ok (%d segment policies and default_policy, %d limits%s)\n", p, len(d.Segments), limits, budgets)
		for _, b := range d.Budgets {
			fmt.Fprintf(w, "%s: budget %q: %s\n", p, b.Name, policy.DescribeBudget(b))
		}
		for _, line := range d.DescribeUserLimits() {
			fmt.Fprintf(w, "%s: %s\n", p, line)
		}
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
		d, problems, err := config.ReadPolicy(p)
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

// PolicyStoreOptions name a policy store and how to reach it.
type PolicyStoreOptions struct {
	Store string // a directory, file:///dir or s3://bucket/prefix
	S3    objstore.S3Options
	Now   func() time.Time // publication time; nil is time.Now
	// Config is the workers' config, when known (publish --config): a
	// policy that needs a key it leaves unset is published with a warning
	// (the store may serve workers of another config too).
	Config *config.Config
}

func openPolicyStore(ctx context.Context, o PolicyStoreOptions) (objstore.Store, error) {
	st, err := objstore.Open(ctx, o.Store, objstore.Options{S3: o.S3})
	if err != nil {
		return nil, fmt.Errorf("policy store: %w", err)
	}
	return st, nil
}

// PublishPolicy checks a policy document and publishes it to the store as
// a new version (LATEST last), printing the version and what changed from
// the version in use. A policy with problems is printed, not published
// (ErrPolicyProblems); one o.Config cannot run is warned about.
func PublishPolicy(ctx context.Context, w io.Writer, file string, o PolicyStoreOptions) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read policy: %w", err)
	}
	d, ps, err := policy.Read(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, p := range ps {
		fmt.Fprintf(w, "%s: %s\n", file, p.Error())
	}
	if len(ps) > 0 {
		fmt.Fprintf(w, "%s: not published\n", file)
		return ErrPolicyProblems
	}
	st, err := openPolicyStore(ctx, o)
	if err != nil {
		return err
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if o.Config != nil {
		for _, p := range o.Config.PolicyNeeds(d) {
			fmt.Fprintf(w, "warning: workers with --config will refuse it: %s\n", p.Error())
		}
	}
	pub, err := policy.Publish(ctx, st, data, now())
	if err != nil {
		return err
	}
	if pub.Unchanged {
		fmt.Fprintf(w, "%s: unchanged, %s is in use in %s\n", file, pub.Version, st)
		return nil
	}
	fmt.Fprintf(w, "%s: published %s to %s (workers switch at their next poll)\n", file, pub.Version, st)
	for _, c := range pub.Changes {
		fmt.Fprintf(w, "  %s\n", c)
	}
	return nil
}

// PolicyHistory prints the store's versions, oldest first, the one in use
// marked, each with what changed from the one before.
func PolicyHistory(ctx context.Context, w io.Writer, o PolicyStoreOptions) error {
	st, err := openPolicyStore(ctx, o)
	if err != nil {
		return err
	}
	versions, err := policy.History(ctx, st)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		fmt.Fprintf(w, "no policy published in %s\n", st)
		return nil
	}
	var prev *policy.Document
	for _, v := range versions {
		data, err := policy.ReadVersion(ctx, st, v.Name)
		if err != nil {
			return err
		}
		d, err := policy.Parse(data)
		if err != nil {
			return fmt.Errorf("policy %s: %w", v.Name, err)
		}
		mark := " "
		if v.Current {
			mark = "*"
		}
		fmt.Fprintf(w, "%s %s  published %s\n", mark, v.Name, v.Published.Format(time.RFC3339))
		if prev == nil {
			fmt.Fprintf(w, "    first version: %d segment policies and default_policy\n", len(d.Segments))
		} else {
			changes := policy.Diff(prev, d)
			if len(changes) == 0 {
				changes = []string{"no change in what it decides"}
			}
			for _, c := range changes {
				fmt.Fprintf(w, "    %s\n", c)
			}
		}
		prev = d
	}
	return nil
}
