// `tessera plot METRICS_FILE [--out FILE.svg]`: a run's training curves from its --metrics_file
// (coordinator/monitoring/training_monitor.h's lines) as one SVG: the training loss, the examples
// per second, and each validation metric present (loss, AUC, accuracy), each against the global
// step.
//
//   $ recsys --eval_every=500 --metrics_file=run.jsonl
//   $ tessera plot run.jsonl                  # writes run.svg
//   tessera plot: 3 curves of 41 intervals and 4 validations in run.svg
//
// The SVG is self-contained (no script, no external font or style): a browser, an image viewer
// or a README shows it. Lines of another kind, or a resumed run's lines appended to the same
// file, are plotted as they come (in step order).
//
// Thread-safety: pure functions over files and streams.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::cli {

// One curve: its title, and (step, value) points in step order.
struct Curve {
  std::string title;
  std::vector<std::pair<double, double>> points;
};

// The curves of a metrics file's text: "training loss" and "examples per second" from its
// interval lines, "validation loss" / "validation AUC" / "validation accuracy" from its
// evaluation lines (those with values). InvalidArgument naming the line for a line that is not a
// JSON object, or an interval or evaluation line without a numeric step; InvalidArgument when no
// line has anything to plot.
absl::StatusOr<std::vector<Curve>> ReadCurves(const std::string& text);

// The curves as an SVG document: one panel per curve, stacked, each with its value range and
// step range labelled.
std::string CurvesSvg(const std::vector<Curve>& curves, const std::string& title);

// Reads `metrics_file`, writes the SVG to `out_path` (default: metrics_file with its extension
// replaced by .svg) and says so on `out`. NotFound / InvalidArgument for a file that cannot be
// read or parsed (ReadCurves); Unavailable when the SVG cannot be written.
absl::Status RunPlot(const std::string& metrics_file, std::string out_path, std::ostream& out);

}  // namespace tessera::cli
