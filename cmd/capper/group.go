package main

// capper group leave: static workers removed from their consumer groups.

import (
	"errors"
	"fmt"

	"github.com/capper-dev/capper/internal/app"
)

type groupCmd struct {
	Leave groupLeaveCmd `cmd:"" help:"Remove static workers (kafka.group_instance_id) that are gone for good from every consumer group of the config: their partitions move to the others at once, instead of after kafka.session_timeout. The Helm chart runs it after a scale-down."`
}

type groupLeaveCmd struct {
	Config   string   `required:"" type:"existingfile" help:"Config file (its Kafka settings and groups)." completion:"<file>"`
	Instance []string `required:"" placeholder:"ID" help:"Instance id of a worker to remove (repeat the flag); one that is no member of a group is skipped."`
}

func (c *groupLeaveCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	left, err := app.LeaveGroups(e.ctx, cfg, c.Instance, log)
	failed := 0
	for _, l := range left {
		switch {
		case l.Error != "":
			failed++
			fmt.Fprintf(e.stdout, "%s: %s: not removed: %s\n", l.Group, l.Instance, l.Error)
		case l.Removed:
			fmt.Fprintf(e.stdout, "%s: %s: removed\n", l.Group, l.Instance)
		default:
			fmt.Fprintf(e.stdout, "%s: %s: no member\n", l.Group, l.Instance)
		}
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return errors.New("some workers could not be removed (above)")
	}
	return nil
}
