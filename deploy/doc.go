// Package deploy holds capper's deployment artifacts and their checks: the
// Helm chart (helm/capper), the Grafana dashboard (grafana/capper.json), the
// alerts' promtool unit tests (prometheus/alerts_test.yaml) and, at the
// repository root, the Dockerfile and .dockerignore.
//
// It has no code of its own. Its tests lint and render the chart with helm,
// decode every rendered manifest strictly into its Kubernetes API type, run
// capper's own config validation on the rendered ConfigMap, check that the
// render refuses every config capper refuses (values.schema.json has exactly
// the config's keys; the validate template its rules across keys), check
// every dashboard and alert expression against the metrics a real capper
// worker registers, run the alerts' unit tests with promtool, and build the
// binaries with the Dockerfile's exact command.
package deploy
