package main

// capper topics check|create: the Kafka topics a worker config names, and
// the lane topics (and their retry topics) of its policy's budgets.

import (
	"fmt"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/topics"
)

type topicsCmd struct {
	Check  topicsCheckCmd  `cmd:"" help:"Check every topic the config names, and the lane topics (each with its retry topic) of the policy's budgets: one line per topic (ok, warn, missing, or wrong with the fix); exit 1 naming each missing or wrong one."`
	Create topicsCreateCmd `cmd:"" help:"Create the topics the config names, and the lane topics of the policy's budgets (each with its retry topic), that are missing, with the partitions and settings capper needs; existing topics are never altered (a wrong one is reported, exit 1)."`
}

// policyFlag is a command's --policy: the policy whose budgets it covers,
// instead of the one in force.
type policyFlag struct {
	Policy string `type:"existingfile" placeholder:"FILE" help:"Policy document (or worker config) whose budgets to use instead of the policy in force (policy.source of --config), e.g. one about to be published." completion:"<file>"`
}

type topicsCheckCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file (its Kafka settings, the topics it names, and the policy in force: policy.source)." completion:"<file>"`
	policyFlag
	Output string `short:"o" enum:"table,json" default:"table" help:"Output format: table or json."`
}

func (c *topicsCheckCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	r, err := app.CheckTopics(e.ctx, cfg, app.TopicsOptions{ConfigPath: c.Config, PolicyFile: c.Policy}, log)
	if err != nil {
		return err
	}
	if err := writeTopicsReport(e, r, c.Output); err != nil {
		return err
	}
	return r.Err()
}

type topicsCreateCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file (its Kafka settings, the topics it names, and the policy in force: policy.source)." completion:"<file>"`
	policyFlag
	Partitions        int    `default:"12" help:"Partitions of the input topic when it is created (as many as the most workers you expect); every other topic but the control topic (1) gets as many as the input has."`
	ReplicationFactor int    `name:"replication-factor" default:"-1" help:"Replication factor of the topics created; -1: the brokers' default.replication.factor."`
	DryRun            bool   `name:"dry-run" help:"Print what would be created; create nothing."`
	Output            string `short:"o" enum:"table,json" default:"table" help:"Output format: table or json."`
}

func (c *topicsCreateCmd) Run(e *env) error {
	if c.Partitions < 1 {
		return cli.UsageError(fmt.Errorf("--partitions: %d; give at least 1", c.Partitions))
	}
	if c.ReplicationFactor == 0 || c.ReplicationFactor < -1 {
		return cli.UsageError(fmt.Errorf("--replication-factor: %d; give at least 1, or -1 for the brokers' default", c.ReplicationFactor))
	}
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	r, err := app.CreateTopics(e.ctx, cfg, app.TopicsOptions{ConfigPath: c.Config, PolicyFile: c.Policy, Partitions: c.Partitions,
		ReplicationFactor: c.ReplicationFactor, DryRun: c.DryRun}, log)
	if len(r.Findings) > 0 {
		if werr := writeTopicsReport(e, r, c.Output); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	return r.Err()
}

// writeTopicsReport prints a report as -o says.
func writeTopicsReport(e *env, r topics.Report, format string) error {
	if format == "json" {
		return r.WriteJSON(e.stdout)
	}
	return r.WriteText(e.stdout)
}
