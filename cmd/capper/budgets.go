package main

// capper budgets list|show: the send-pacing budgets of the policy in force
// and the intents waiting in their lanes.

import (
	"errors"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
)

type budgetsCmd struct {
	List budgetsListCmd `cmd:"" default:"withargs" help:"One line per budget: name, rate, burst, what it covers, lanes, the intents waiting in its lanes and when they drain (the default). Exit 1 naming each missing lane topic."`
	Show budgetsShowCmd `cmd:"" help:"A budget, and a line per lane: the priorities it takes, its topic, the intents waiting in it and when they drain (lanes drain in precedence order). Exit 1 naming each missing lane topic."`
}

// budgetsFlags are what list and show take.
type budgetsFlags struct {
	Config string `required:"" type:"existingfile" help:"Config file (its Kafka settings, kafka.topics.lanes, the delay group, and the policy in force: policy.source)." completion:"<file>"`
	policyFlag
	Output string `short:"o" enum:"table,json" default:"table" help:"Output format: table or json."`
}

type budgetsListCmd struct {
	budgetsFlags
}

func (c *budgetsListCmd) Run(e *env) error {
	r, err := c.report(e, "")
	if err != nil {
		return err
	}
	if c.Output == "json" {
		err = r.WriteJSON(e.stdout, false)
	} else {
		err = r.WriteList(e.stdout)
	}
	if err != nil {
		return err
	}
	return r.Err()
}

type budgetsShowCmd struct {
	Budget string `arg:"" name:"name" help:"The budget's name."`
	budgetsFlags
}

func (c *budgetsShowCmd) Run(e *env) error {
	r, err := c.report(e, c.Budget)
	if err != nil {
		return err
	}
	if c.Output == "json" {
		err = r.WriteJSON(e.stdout, true)
	} else {
		err = r.WriteShow(e.stdout)
	}
	if err != nil {
		return err
	}
	return r.Err()
}

// report reads the budgets (one, with name) and what waits in them.
func (c *budgetsFlags) report(e *env, name string) (*app.BudgetsReport, error) {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return nil, err
	}
	r, err := app.Budgets(e.ctx, cfg, app.BudgetsOptions{ConfigPath: c.Config, PolicyFile: c.Policy, Budget: name}, log)
	if errors.Is(err, app.ErrUnknownBudget) {
		return nil, cli.UsageError(err)
	}
	return r, err
}
