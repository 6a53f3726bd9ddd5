package main

// segment-builder plan: campaign plans' audiences built like segments and
// published to a plan store (internal/plans), listed and withdrawn.

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/segbuild"
)

type planCmd struct {
	Publish  planPublishCmd  `cmd:"" help:"Build a plan's audience and publish the plan (it becomes active; a plan of the same campaign is replaced)."`
	List     planListCmd     `cmd:"" help:"List the active plans of a plan store."`
	Withdraw planWithdrawCmd `cmd:"" help:"Withdraw a campaign's plan (its slots are free at the workers' next poll)."`
}

type planPublishCmd struct {
	File string `arg:"" placeholder:"PLAN.yaml" help:"The plan: campaign, priority, starts, ends, message, audience."`
	To   string `name:"to" placeholder:"DIR|s3://BUCKET/PREFIX" help:"The plan store (default: plans.source of --config)."`
}

type planListCmd struct {
	From string `name:"from" placeholder:"DIR|s3://BUCKET/PREFIX" help:"The plan store (default: plans.source of --config)."`
}

type planWithdrawCmd struct {
	Campaign string `arg:"" help:"The campaign whose plan to withdraw."`
	From     string `name:"from" placeholder:"DIR|s3://BUCKET/PREFIX" help:"The plan store (default: plans.source of --config)."`
}

// planStore opens the store named on the command line, else the config's.
func (e *env) planStore(flag string) (objstore.Store, objstore.S3Options, error) {
	c := e.flags
	var s3 objstore.S3Options
	if c.Config != "" {
		if cfg, err := config.Load(c.Config); err == nil { // a worker config
			if flag == "" {
				flag = cfg.Plans.Source
			}
			s3 = objstore.S3Options{Region: cfg.Segments.S3.Region, Endpoint: cfg.Segments.S3.Endpoint, UsePathStyle: cfg.Segments.S3.UsePathStyle}
		}
	}
	if c.S3Region != "" {
		s3.Region = c.S3Region
	}
	if c.S3Endpoint != "" {
		s3.Endpoint = c.S3Endpoint
	}
	s3.UsePathStyle = s3.UsePathStyle || c.S3PathStyle
	if flag == "" {
		return nil, s3, cli.UsageError(errors.New("no plan store: give --to/--from, or --config with plans.source"))
	}
	st, err := objstore.Open(e.ctx, flag, objstore.Options{S3: s3})
	return st, s3, err
}

func (p planPublishCmd) Run(e *env) error {
	if e.flags.Config == "" {
		return cli.UsageError(errors.New("plan publish needs --config: the policy's channels and categories check the plan's message"))
	}
	data, err := os.ReadFile(p.File)
	if err != nil {
		return err
	}
	spec, err := plans.ParseSpec(data)
	if err != nil {
		return fmt.Errorf("%s: %w", p.File, err)
	}
	doc, ps, err := config.ReadPolicy(e.flags.Config)
	if err != nil {
		return cli.UsageError(err)
	}
	if err := ps.Err(); err != nil {
		return cli.UsageError(fmt.Errorf("policy %s:\n%w", e.flags.Config, err))
	}
	rules, _ := doc.Rules()
	prio, problems := spec.Check(rules)
	if err := problems.Err(); err != nil {
		return fmt.Errorf("%s:\n%w", p.File, err)
	}
	st, s3, err := e.planStore(p.To)
	if err != nil {
		return err
	}
	logger, err := cli.NewLogger(e.stderr, e.flags.LogLevel, e.flags.LogFormat)
	if err != nil {
		return cli.UsageError(err)
	}
	aud, err := segbuild.BuildAudience(e.ctx, spec.AudienceFrom(filepath.Dir(p.File)), segbuild.InputOptions{Stdin: e.stdin, S3: s3}, e.flags.MaxErrors, logger)
	if err != nil {
		// As a build's: a malformed line is named by where it is; its
		// content (a user id, maybe) only at debug.
		err = fmt.Errorf("%s: %w", p.File, err)
		logFailure(logger, err)
		return cli.Reported(err)
	}
	if len(aud.BadLines) > 0 {
		logSkipped(logger, aud.BadLines, e.flags.MaxErrors)
	}
	m, err := plans.Publish(e.ctx, st, spec, prio, aud.Data, aud.Users, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "published plan %s of campaign %s to %s: priority %s, %s to %s, %s, %d users (%d bytes)\n",
		m.Version, m.Campaign, st, m.Priority, m.Starts.Format(time.RFC3339), m.Ends.Format(time.RFC3339), message(m.Message), m.Audience.Users, m.Audience.Bytes)
	if !time.Now().Before(m.Ends) {
		fmt.Fprintln(e.stdout, "its window has ended: workers ignore it; capper replay --plans uses it")
	}
	return nil
}

func (p planListCmd) Run(e *env) error {
	st, _, err := e.planStore(p.From)
	if err != nil {
		return err
	}
	idx, err := plans.ReadIndex(e.ctx, st)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "campaign\tpriority\tstarts\tends\tmessage\tusers\tversion")
	now, ended := time.Now(), 0
	for _, r := range idx.Plans {
		m, err := plans.ReadManifest(e.ctx, st, r.Version)
		if err != nil {
			return err
		}
		end := m.Ends.Format(time.RFC3339)
		if !now.Before(m.Ends) {
			end += " (ended)"
			ended++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Campaign, m.Priority, m.Starts.Format(time.RFC3339), end,
			message(m.Message), m.Audience.Users, m.Version)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%d plans in %s (set %s): %d in force, %d ended (kept for capper replay --plans)\n",
		len(idx.Plans), st, cmp.Or(idx.Version, "none"), len(idx.Plans)-ended, ended)
	return nil
}

func (p planWithdrawCmd) Run(e *env) error {
	st, _, err := e.planStore(p.From)
	if err != nil {
		return err
	}
	if err := plans.Withdraw(e.ctx, st, p.Campaign, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "withdrew the plan of campaign %s from %s (workers free its slots at their next poll)\n", p.Campaign, st)
	return nil
}

func message(m plans.Message) string {
	s := m.Channel + " " + m.Category
	for _, t := range m.Tags {
		s += " #" + t
	}
	return s
}
