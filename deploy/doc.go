// Package deploy holds capper's deployment artifacts and their checks: the
// Helm chart (helm/capper), the Grafana dashboard (grafana/capper.json) and,
// at the repository root, the Dockerfile and .dockerignore.
//
// It has no code of its own. Its tests lint and render the chart with helm,
// decode every rendered manifest strictly into its Kubernetes API type, run
// capper's own config validation on the rendered ConfigMap, check every
// dashboard and alert expression against the metrics a real capper worker
// registers, and build the binaries with the Dockerfile's exact command.
package deploy
