// What the request readers (predict_request.h, example_request.h) share to read a body with
// nlohmann's SAX parser instead of a JSON tree of the whole (Note [Bounded predict requests]):
// the kinds of JSON value, names as error messages show them; ValueBuilder, which builds one
// small value (an instance, an example, a column's value) from SAX events and refuses one that
// grows beyond what any value of the signature holds; and RowReader, which hands each element of
// a top-level array field to a callback as such a value.
//
//   ValueBuilder value(MaxValues(format));
//   // in a SAX handler, for the events of one value:
//   if (!value.Add(Json(3))) return fail(value.TooLarge("instance 0", format));
//   if (value.complete()) use(value.Take());
//
//   RowReader rows("instances", /*occurrence=*/1, "instance", format,
//                  [&](Json instance, int64_t i) { return builder.Add(instance); });
//   Json::sax_parse(body.begin(), body.end(), &rows);   // stops after the array, or an error
//   TESSERA_RETURN_IF_ERROR(rows.status());
//
// Thread-safety: a ValueBuilder is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "serving/instances.h"
#include "serving/json.h"

namespace tessera::serving {

// The kinds of JSON value.
enum class JsonKind { kNull, kBoolean, kInteger, kNumber, kString, kArray, kObject, kBinary };

// "null", "a boolean", "an integer", "a number", "a string", "an array", "an object".
const char* JsonKindName(JsonKind kind);

// A field name as an error message shows it: long ones cut.
std::string ShownName(const std::string& name);

// Values (numbers, strings, containers) beyond which a value is surely not one of `format`'s
// instances: an object with each input, a dense input an array of `width` numbers, twice over.
int64_t MaxValues(const InstanceFormat& format);

class ValueBuilder {
 public:
  explicit ValueBuilder(int64_t max_values) : max_values_(max_values) {}

  // Adds a scalar where the value expects its next one, or opens a container (an empty array or
  // object) there. False, adding nothing, when the value would hold more than max_values.
  bool Add(Json value);
  // The key of the next value of the innermost (object) container.
  void Key(std::string key) { key_ = std::move(key); }
  // Closes the innermost container.
  void Close() { stack_.pop_back(); }

  // Something was added and every container is closed.
  bool complete() const { return started_ && stack_.empty(); }
  // Adding has begun and the value is not complete.
  bool open() const { return !stack_.empty(); }
  // The value; the builder is empty afterwards.
  Json Take();

  // InvalidArgument "WHAT: more than N values; the signature's inputs are ...".
  absl::Status TooLarge(absl::string_view what, const InstanceFormat& format) const;

 private:
  const int64_t max_values_;
  int64_t values_ = 0;
  bool started_ = false;
  Json value_;
  std::vector<Json*> stack_;  // the open containers of value_
  std::string key_;
};

// Pass 2 of a row request: each element of the `occurrence`-th (from 1) top-level field named
// `field` (an array) as a small JSON tree, handed to `row` as soon as it is complete; the first
// error (the callback's, annotated "LABEL I", or a too large element) stops the reading.
class RowReader {
 public:
  using Row = std::function<absl::Status(Json element, int64_t index)>;

  RowReader(std::string field, int occurrence, std::string label, const InstanceFormat& format,
            Row row)
      : field_(std::move(field)),
        occurrence_(occurrence),
        label_(std::move(label)),
        format_(format),
        value_(MaxValues(format)),
        row_(std::move(row)) {}

  // nlohmann's SAX interface.
  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool value) { return Put(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return Put(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return Put(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t&) { return Put(Json(value)); }
  bool string(Json::string_t& value) { return Put(Json(std::move(value))); }
  bool binary(Json::binary_t&) { return Put(Json()); }
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t);
  bool end_object() { return Close(); }
  bool end_array();
  bool key(Json::string_t& key);
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error);

  const absl::Status& status() const { return status_; }

 private:
  bool building() const { return in_field_ && depth_ >= 2; }
  bool Open(Json container);
  bool Close();
  bool Put(Json value);
  bool Finish();

  const std::string field_;
  const int occurrence_;
  const std::string label_;
  const InstanceFormat& format_;
  ValueBuilder value_;
  Row row_;
  int occurrences_ = 0;
  bool in_field_ = false;
  int64_t depth_ = 0;
  std::string key_;
  int64_t index_ = 0;
  absl::Status status_;
};

}  // namespace tessera::serving
