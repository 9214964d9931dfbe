#include "cli/plot_command.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "serving/json.h"

namespace tessera::cli {

using serving::Json;
using serving::ParseJson;
namespace {

constexpr double kWidth = 720, kPanelHeight = 170, kLeft = 70, kRight = 16, kTop = 40;
constexpr double kPlotHeight = 120;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double value) {
  const double a = std::fabs(value);
  if (a >= 1e6) return absl::StrFormat("%.2fM", value / 1e6);
  if (a >= 1e4) return absl::StrFormat("%.1fk", value / 1e3);
  if (a >= 100 || value == std::floor(value)) return absl::StrFormat("%.0f", value);
  return absl::StrFormat("%.4g", value);
}

}  // namespace

absl::StatusOr<std::vector<Curve>> ReadCurves(const std::string& text) {
  // Titles in the order they are drawn.
  const std::vector<std::pair<std::string, std::string>> interval_fields = {
      {"loss", "training loss"}, {"examples_per_sec", "examples per second"}};
  const std::vector<std::pair<std::string, std::string>> evaluation_fields = {
      {"loss", "validation loss"}, {"auc", "validation AUC"}, {"accuracy", "validation accuracy"}};
  std::map<std::string, Curve> curves;
  int64_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    absl::StatusOr<Json> parsed = ParseJson(line);
    if (!parsed.ok() || !parsed->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, " is not a JSON object (a --metrics_file has one a line)"));
    }
    const Json& object = *parsed;
    const Json& kind_field = object.contains("kind") ? object["kind"] : Json();
    const std::string kind = kind_field.is_string() ? kind_field.get<std::string>() : "";
    if (kind != "interval" && kind != "evaluation") continue;
    if (!object.contains("step") || !object["step"].is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": an ", kind, " line without a numeric \"step\""));
    }
    const double step = object["step"].get<double>();
    for (const auto& [field, title] : kind == "interval" ? interval_fields : evaluation_fields) {
      if (!object.contains(field) || !object[field].is_number()) continue;
      const double value = object[field].get<double>();
      if (!std::isfinite(value)) continue;
      curves[title].title = title;
      curves[title].points.emplace_back(step, value);
    }
  }
  std::vector<Curve> out;
  for (const auto& fields : {interval_fields, evaluation_fields}) {
    for (const auto& [field, title] : fields) {
      auto it = curves.find(title);
      if (it == curves.end()) continue;
      std::stable_sort(it->second.points.begin(), it->second.points.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back(std::move(it->second));
    }
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        "nothing to plot: no interval or evaluation line with a value (is this a --metrics_file?)");
  }
  return out;
}

std::string CurvesSvg(const std::vector<Curve>& curves, const std::string& title) {
  const double height = kTop + kPanelHeight * static_cast<double>(curves.size());
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
      kWidth, height, kWidth, height, kLeft, Escape(title));
  double x0 = 0, x1 = 0;
  bool first = true;
  for (const Curve& curve : curves) {
    for (const auto& [step, value] : curve.points) {
      x0 = first ? step : std::min(x0, step);
      x1 = first ? step : std::max(x1, step);
      first = false;
    }
  }
  if (x1 == x0) x1 = x0 + 1;
  for (size_t c = 0; c < curves.size(); ++c) {
    const Curve& curve = curves[c];
    const double top = kTop + kPanelHeight * static_cast<double>(c) + 20;
    double y0 = curve.points.front().second, y1 = y0;
    for (const auto& point : curve.points) {
      y0 = std::min(y0, point.second);
      y1 = std::max(y1, point.second);
    }
    if (y1 == y0) {
      y0 -= 0.5;
      y1 += 0.5;
    }
    auto sx = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kWidth - kLeft - kRight); };
    auto sy = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * kPlotHeight; };
    absl::StrAppendFormat(
        &svg,
        "<g class=\"panel\">\n<text x=\"%.0f\" y=\"%.1f\" font-weight=\"bold\">%s</text>\n"
        "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
        "stroke=\"#d0d4dc\"/>\n"
        "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n"
        "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n"
        "<text x=\"%.0f\" y=\"%.1f\">step %s</text>\n"
        "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">step %s</text>\n",
        kLeft, top - 6, Escape(curve.title), kLeft, top, kWidth - kLeft - kRight, kPlotHeight,
        kLeft - 6, top + 10, Number(y1), kLeft - 6, top + kPlotHeight, Number(y0), kLeft,
        top + kPlotHeight + 13, Number(x0), kWidth - kRight, top + kPlotHeight + 13, Number(x1));
    std::string points;
    for (const auto& [step, value] : curve.points) {
      absl::StrAppendFormat(&points, "%s%.1f,%.1f", points.empty() ? "" : " ", sx(step),
                            sy(value));
    }
    absl::StrAppendFormat(&svg,
                          "<polyline fill=\"none\" stroke=\"#2f6fde\" stroke-width=\"1.5\" "
                          "points=\"%s\"/>\n</g>\n",
                          points);
  }
  svg += "</svg>\n";
  return svg;
}

absl::Status RunPlot(const std::string& metrics_file, std::string out_path, std::ostream& out) {
  std::ifstream in(metrics_file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", metrics_file));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<Curve>> curves = ReadCurves(text.str());
  if (!curves.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(metrics_file, ": ", curves.status().message()));
  }
  if (out_path.empty()) {
    const size_t slash = metrics_file.rfind('/');
    const size_t dot = metrics_file.rfind('.');
    out_path = (dot != std::string::npos && (slash == std::string::npos || dot > slash))
                   ? metrics_file.substr(0, dot) + ".svg"
                   : metrics_file + ".svg";
  }
  const std::string svg = CurvesSvg(*curves, metrics_file);
  std::ofstream file(out_path, std::ios::binary | std::ios::trunc);
  file << svg;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write ", out_path));
  size_t intervals = 0, validations = 0;
  for (const Curve& curve : *curves) {
    if (curve.title == "training loss") intervals = curve.points.size();
    if (curve.title == "validation loss") validations = curve.points.size();
  }
  out << "tessera plot: " << curves->size() << " curves of " << intervals << " intervals and "
      << validations << " validations in " << out_path << "\n";
  return absl::OkStatus();
}

}  // namespace tessera::cli
