// Package docscheck owns the checks that keep capper's documentation
// (README.md, CONTRIBUTING.md and every page under docs/) from drifting
// away from the code. Its code reads the Markdown: fenced blocks with the
// check marker before each, headings and their GitHub anchors, links,
// inline code and the command lines of shell blocks. Its tests, run by
// `make test`, check that:
//
//   - every yaml and json block parses with capper's own loader for what
//     its marker says it is (policy, limits, config, plan, intent,
//     status), or fails with the error its marker shows, or is marked as
//     not checked, with the reason;
//   - every relative link and #anchor resolves;
//   - every metric, config key and alert named exists, and every metric a
//     real worker registers, every config key and every alert is named in
//     its reference page (docs/reference/);
//   - every key of the policy and plan documents is named in its format
//     page.
//
// The command lines of shell blocks are parsed with each binary's own
// command line, by tests in cmd/capper and cmd/segment-builder (they are
// package main), with Commands. CONTRIBUTING.md says how a block is marked.
package docscheck
