package main

// capper campaign stop|pause|resume|list: campaign control.

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/control"
)

type campaignCmd struct {
	Stop   campaignStopCmd   `cmd:"" help:"Stop a campaign: every intent of it capper holds (backlog, delay tiers, redeliveries) is cancelled from now on, never counted, and its campaign plans book nothing. Resuming does not bring cancelled intents back."`
	Pause  campaignPauseCmd  `cmd:"" help:"Pause a campaign (or, with --all, every intent not of an exempt category): its intents wait in the delay tiers, uncounted, until it is resumed (or control.max_pause passes, or their send-by: then they are cancelled)."`
	Resume campaignResumeCmd `cmd:"" help:"Make a campaign (or, with --all, every intent) active again: new and paused intents are decided as usual."`
	List   campaignListCmd   `cmd:"" help:"List every campaign with a control record: state, since, send-by, who, when, why."`
}

// campaignArgs are what stop, pause and resume take.
type campaignArgs struct {
	Config   string `required:"" type:"existingfile" help:"Config file (its Kafka settings and kafka.topics.control)." completion:"<file>"`
	Campaign string `arg:"" optional:"" name:"campaign" help:"The campaign id (its intents' campaign_id)."`
	All      bool   `help:"Every intent not of an exempt category, instead of one campaign (an incident switch; pause and resume only)."`
	Reason   string `help:"Why (free text, required to stop or pause)."`
	By       string `help:"Who; default the user running the command."`
	SendBy   string `name:"send-by" help:"None of the campaign's intents is delivered after this time (RFC 3339); 'none' removes it. Default: keep the one it has."`
}

type (
	campaignStopCmd   struct{ campaignArgs }
	campaignPauseCmd  struct{ campaignArgs }
	campaignResumeCmd struct{ campaignArgs }
)

func (c *campaignStopCmd) Run(e *env) error   { return c.set(e, control.Stopped) }
func (c *campaignPauseCmd) Run(e *env) error  { return c.set(e, control.Paused) }
func (c *campaignResumeCmd) Run(e *env) error { return c.set(e, control.Active) }

func (c *campaignArgs) set(e *env, st control.State) error {
	change := app.CampaignChange{Campaign: c.Campaign, All: c.All, State: st, Reason: c.Reason, By: c.By}
	switch {
	case c.All && c.Campaign != "":
		return cli.UsageError(errors.New("give a campaign id or --all, not both"))
	case !c.All && c.Campaign == "":
		return cli.UsageError(errors.New("campaign: an id is required (or --all)"))
	case c.All && st == control.Stopped:
		return cli.UsageError(errors.New("--all: every intent can be paused and resumed, not stopped: stop campaigns one by one, or pause --all"))
	}
	switch v := c.SendBy; v {
	case "":
	case "none":
		change.ClearSendBy = true
	default:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return cli.UsageError(fmt.Errorf("--send-by: %q is not an RFC 3339 time (or none)", v))
		}
		change.SendBy = t
	}
	if change.By == "" {
		change.By = whoami()
	}
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	w, err := app.SetCampaign(e.ctx, cfg, change, log)
	if err != nil {
		return err
	}
	return w.WriteText(e.stdout)
}

// whoami is the user running the command, and where.
func whoami() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return strings.TrimPrefix(name, "@")
}

type campaignListCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file (its Kafka settings and kafka.topics.control)." completion:"<file>"`
	Output string `short:"o" enum:"table,json" default:"table" help:"Output format: table or json."`
}

func (c *campaignListCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	l, err := app.ListCampaigns(e.ctx, cfg, log)
	if err != nil {
		return err
	}
	if c.Output == "json" {
		return l.WriteJSON(e.stdout)
	}
	return l.WriteTable(e.stdout)
}
