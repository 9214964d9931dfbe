// `tessera plot`: curves from a --metrics_file's lines, the SVG drawn from them, and bad files.
#include "cli/plot_command.h"

#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/temp_dir.h"

namespace tessera::cli {
namespace {

using tessera::testing::ReadFile;
using tessera::testing::TempDir;

const char kMetrics[] =
    R"({"kind":"interval","step":100,"seconds":1.0,"examples_per_sec":50000,"loss":0.69}
{"kind":"interval","step":200,"seconds":2.0,"examples_per_sec":52000,"loss":0.65}
{"kind":"evaluation","step":200,"loss":0.66,"auc":0.61,"final":false}
{"kind":"interval","step":300,"seconds":3.0,"examples_per_sec":51000,"loss":0.62}
{"kind":"evaluation","step":300,"loss":0.64,"auc":0.63,"final":true}
)";

void CheckPoints(const Curve& curve, const std::vector<std::pair<double, double>>& want) {
  CAPTURE(curve.title);
  REQUIRE(curve.points.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(curve.points[i].first == want[i].first);
    CHECK(curve.points[i].second == doctest::Approx(want[i].second).epsilon(1e-6));
  }
}

TEST_CASE("a metrics file's lines become curves against the step") {
  auto curves = ReadCurves(kMetrics);
  REQUIRE_MESSAGE(curves.ok(), curves.status());
  REQUIRE(curves->size() == 4);
  CHECK((*curves)[0].title == "training loss");
  CheckPoints((*curves)[0], {{100, 0.69}, {200, 0.65}, {300, 0.62}});
  CHECK((*curves)[1].title == "examples per second");
  CHECK((*curves)[2].title == "validation loss");
  CHECK((*curves)[3].title == "validation AUC");
  CheckPoints((*curves)[3], {{200, 0.61}, {300, 0.63}});
}

TEST_CASE("the SVG has one panel and polyline per curve, its points inside the plot") {
  auto curves = ReadCurves(kMetrics);
  REQUIRE(curves.ok());
  const std::string svg = CurvesSvg(*curves, "run <1>");
  CHECK(absl::StartsWith(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(absl::StrContains(svg, "run &lt;1&gt;"));  // escaped
  std::regex polyline("<polyline [^>]*points=\"([^\"]*)\"");
  std::vector<std::vector<std::string>> lines;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    lines.push_back(absl::StrSplit((*it)[1].str(), ' '));
  }
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].size() == 3);
  CHECK(lines[3].size() == 2);
  // The loss falls: its last point is lower on the page (a larger y) than its first.
  const std::vector<std::string> first = absl::StrSplit(lines[0].front(), ',');
  const std::vector<std::string> last = absl::StrSplit(lines[0].back(), ',');
  CHECK(std::stod(last[1]) > std::stod(first[1]));
  CHECK(std::stod(last[0]) > std::stod(first[0]));
}

TEST_CASE("tessera plot writes the SVG beside the file, or where --out says") {
  TempDir dir;
  const std::string metrics = dir.Sub("run.jsonl");
  std::ofstream(metrics) << kMetrics;
  std::ostringstream out;
  REQUIRE(RunPlot(metrics, "", out).ok());
  CHECK(out.str() == "tessera plot: 4 curves of 3 intervals and 2 validations in " +
                         dir.Sub("run.svg") + "\n");
  CHECK(absl::StrContains(ReadFile(dir.Sub("run.svg")), "<polyline"));
  std::ostringstream elsewhere;
  REQUIRE(RunPlot(metrics, dir.Sub("curves.svg"), elsewhere).ok());
  CHECK(absl::StrContains(ReadFile(dir.Sub("curves.svg")), "</svg>"));
}

TEST_CASE("a file that is missing, not JSON lines, or has nothing to plot is refused") {
  TempDir dir;
  std::ostringstream out;
  CHECK(RunPlot(dir.Sub("missing.jsonl"), "", out).code() == absl::StatusCode::kNotFound);
  const std::string bad = dir.Sub("bad.jsonl");
  std::ofstream(bad) << R"({"kind":"interval","step":1,"loss":0.5})" << "\nnot json\n";
  const absl::Status status = RunPlot(bad, "", out);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "line 2 is not a JSON object"));
  CHECK(ReadCurves(R"({"kind":"interval","loss":0.5})").status().message() ==
        "line 1: an interval line without a numeric \"step\"");
  CHECK(absl::StrContains(ReadCurves("{}\n[]\n").status().message(), "line 2"));
  CHECK(absl::StrContains(ReadCurves("{\"kind\":\"other\",\"step\":1}\n").status().message(),
                          "nothing to plot"));
  CHECK(out.str().empty());
}

}  // namespace
}  // namespace tessera::cli
