#include "serving/model_config.h"

#include <cctype>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

constexpr int64_t kMaxFileBytes = int64_t{4} << 20;
// Messages nest 4 deep in this subset; deeper text is refused rather than recursed into.
constexpr int kMaxDepth = 16;

// One field of the text: a scalar (its value) or a message (its fields).
struct TextField {
  std::string name;
  int line = 0;
  bool message = false;
  std::string value;    // a scalar's: a string's contents, or a number's or identifier's text
  bool quoted = false;  // the scalar was a string
  std::vector<TextField> fields;
};

// Reads protobuf text format into TextFields (the syntax of the header comment).
class TextParser {
 public:
  TextParser(absl::string_view text, absl::string_view file) : text_(text), file_(file) {}

  absl::StatusOr<std::vector<TextField>> Parse() {
    std::vector<TextField> fields;
    TESSERA_RETURN_IF_ERROR(Fields(fields, '\0', 0));
    return fields;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, " line ", line_, ": ", what));
  }

  // Skips whitespace and comments; the next character, or '\0' at the end.
  char Peek() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == '\n') {
        ++line_;
        ++at_;
      } else if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
        ++at_;
      } else if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') ++at_;
      } else {
        return c;
      }
    }
    return '\0';
  }

  static bool IsWordChar(char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
           c == '+';
  }

  // An identifier or number.
  std::string Word() {
    const size_t start = at_;
    while (at_ < text_.size() && IsWordChar(text_[at_])) ++at_;
    return std::string(text_.substr(start, at_ - start));
  }

  // A quoted string with C escapes, at a quote.
  absl::StatusOr<std::string> String() {
    const char quote = text_[at_++];
    std::string out;
    while (true) {
      if (at_ >= text_.size() || text_[at_] == '\n') return Error("unterminated string");
      const char c = text_[at_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) return Error("unterminated string");
      const char e = text_[at_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
        case '\'':
        case '"':
        case '?':
          out += e;
          break;
        case 'x': {
          int value = 0;
          int digits = 0;
          while (digits < 2 && at_ < text_.size() &&
                 absl::ascii_isxdigit(static_cast<unsigned char>(text_[at_]))) {
            const char h = text_[at_++];
            value =
                value * 16 + (absl::ascii_isdigit(static_cast<unsigned char>(h))
                                  ? h - '0'
                                  : absl::ascii_tolower(static_cast<unsigned char>(h)) - 'a' + 10);
            ++digits;
          }
          if (digits == 0) return Error("bad \\x escape in a string");
          out += static_cast<char>(value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int value = e - '0';
            for (int digits = 1;
                 digits < 3 && at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '7';
                 ++digits) {
              value = value * 8 + (text_[at_++] - '0');
            }
            out += static_cast<char>(value & 0xff);
          } else {
            return Error(absl::StrCat("unknown escape '\\", std::string(1, e), "' in a string"));
          }
      }
    }
  }

  // A scalar value into `field`; adjacent strings are concatenated, as protobuf does.
  absl::Status Scalar(TextField& field) {
    const char c = Peek();
    if (c == '"' || c == '\'') {
      field.quoted = true;
      while (Peek() == '"' || Peek() == '\'') {
        TESSERA_ASSIGN_OR_RETURN(std::string part, String());
        field.value += part;
      }
      return absl::OkStatus();
    }
    if (IsWordChar(c)) {
      field.value = Word();
      return absl::OkStatus();
    }
    return Error(absl::StrCat("expected a value for '", field.name, "'"));
  }

  // Fields until `close` ('\0': the end of the text).
  absl::Status Fields(std::vector<TextField>& fields, char close, int depth) {
    if (depth > kMaxDepth) return Error("messages nested too deep");
    while (true) {
      char c = Peek();
      if (c == close) {
        if (c != '\0') ++at_;
        return absl::OkStatus();
      }
      if (c == '\0') return Error(absl::StrCat("missing '", std::string(1, close), "'"));
      if (!absl::ascii_isalpha(static_cast<unsigned char>(c)) && c != '_') {
        return Error(absl::StrCat("expected a field name, got '", std::string(1, c), "'"));
      }
      const int line = line_;
      std::string name = Word();
      c = Peek();
      bool colon = false;
      if (c == ':') {
        colon = true;
        ++at_;
        c = Peek();
      }
      if (c == '{' || c == '<') {
        ++at_;
        TextField field{name, line, true, "", false, {}};
        TESSERA_RETURN_IF_ERROR(Fields(field.fields, c == '{' ? '}' : '>', depth + 1));
        fields.push_back(std::move(field));
      } else if (!colon) {
        return Error(absl::StrCat("expected ':' or '{' after '", name, "'"));
      } else if (c == '[') {  // a list of scalars: one field each
        ++at_;
        if (Peek() == ']') {
          ++at_;
        } else {
          while (true) {
            TextField field{name, line_, false, "", false, {}};
            TESSERA_RETURN_IF_ERROR(Scalar(field));
            fields.push_back(std::move(field));
            c = Peek();
            ++at_;
            if (c == ']') break;
            if (c != ',')
              return Error(absl::StrCat("expected ',' or ']' in the list '", name, "'"));
          }
        }
      } else {
        TextField field{name, line, false, "", false, {}};
        TESSERA_RETURN_IF_ERROR(Scalar(field));
        fields.push_back(std::move(field));
      }
      c = Peek();
      if (c == ',' || c == ';') ++at_;
    }
  }

  absl::string_view text_;
  absl::string_view file_;
  size_t at_ = 0;
  int line_ = 1;
};

// Checks a message's fields against what it may hold, as the interpretation goes.
class Message {
 public:
  Message(const TextField& message, absl::string_view file) : message_(message), file_(file) {}

  absl::Status Error(const TextField& field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, " line ", field.line, ": ", what));
  }

  // Every field must be one of `known`; those of `unsupported` are named as such; every field
  // but those of `repeated` at most once.
  absl::Status CheckFields(const std::vector<std::string>& known,
                           const std::vector<std::string>& unsupported,
                           const std::vector<std::string>& repeated) const {
    std::map<std::string, int> seen;
    for (const TextField& field : message_.fields) {
      const auto is = [&](const std::vector<std::string>& names) {
        for (const std::string& n : names) {
          if (n == field.name) return true;
        }
        return false;
      };
      if (is(unsupported)) {
        return Error(field, absl::StrCat("'", field.name, "' in ", message_.name,
                                         " is not supported by tessera serve"));
      }
      if (!is(known)) {
        return Error(field, absl::StrCat("unknown field '", field.name, "' in ", message_.name));
      }
      if (++seen[field.name] > 1 && !is(repeated)) {
        return Error(field, absl::StrCat("'", field.name, "' is given twice in ", message_.name));
      }
    }
    return absl::OkStatus();
  }

  const TextField* Find(absl::string_view name) const {
    for (const TextField& field : message_.fields) {
      if (field.name == name) return &field;
    }
    return nullptr;
  }

  // A string field's value (null when absent).
  absl::StatusOr<const std::string*> String(absl::string_view name) const {
    const TextField* field = Find(name);
    if (field == nullptr) return nullptr;
    if (field->message || !field->quoted) {
      return Error(*field, absl::StrCat("'", name, "' must be a quoted string"));
    }
    return &field->value;
  }

  // A message field (null when absent).
  absl::StatusOr<const TextField*> Submessage(absl::string_view name) const {
    const TextField* field = Find(name);
    if (field != nullptr && !field->message) {
      return Error(*field, absl::StrCat("'", name, "' must be a message: ", name, " { ... }"));
    }
    return field;
  }

  absl::StatusOr<int64_t> Integer(const TextField& field, int64_t min) const {
    int64_t value = 0;
    if (field.message || field.quoted || !absl::SimpleAtoi(field.value, &value) || value < min) {
      return Error(field, absl::StrCat("'", field.name, "' must be an integer of at least ", min,
                                       ", got '", field.message ? "{...}" : field.value, "'"));
    }
    return value;
  }

  const TextField& field() const { return message_; }

 private:
  const TextField& message_;
  absl::string_view file_;
};

absl::StatusOr<VersionPolicy> ParsePolicy(const TextField& policy_field, absl::string_view file) {
  const Message policy(policy_field, file);
  TESSERA_RETURN_IF_ERROR(policy.CheckFields({"latest", "all", "specific"}, {}, {}));
  if (policy_field.fields.size() != 1) {
    return policy.Error(policy_field,
                        "model_version_policy needs exactly one of latest, all or specific");
  }
  const TextField& choice_field = policy_field.fields[0];
  if (!choice_field.message) {
    return policy.Error(choice_field, absl::StrCat("'", choice_field.name, "' must be a message: ",
                                                   choice_field.name, " { ... }"));
  }
  const Message choice(choice_field, file);
  VersionPolicy result;
  if (choice_field.name == "all") {
    TESSERA_RETURN_IF_ERROR(choice.CheckFields({}, {}, {}));
    result.kind = VersionPolicy::Kind::kAll;
  } else if (choice_field.name == "latest") {
    TESSERA_RETURN_IF_ERROR(choice.CheckFields({"num_versions"}, {}, {}));
    result.kind = VersionPolicy::Kind::kLatest;
    if (const TextField* n = choice.Find("num_versions")) {
      TESSERA_ASSIGN_OR_RETURN(result.latest, choice.Integer(*n, 1));
    }
  } else {
    TESSERA_RETURN_IF_ERROR(choice.CheckFields({"versions"}, {}, {"versions"}));
    result.kind = VersionPolicy::Kind::kSpecific;
    for (const TextField& v : choice_field.fields) {
      TESSERA_ASSIGN_OR_RETURN(const int64_t version, choice.Integer(v, 0));
      result.specific.insert(version);
    }
    if (result.specific.empty()) {
      return choice.Error(choice_field, "specific needs at least one 'versions'");
    }
  }
  return result;
}

absl::StatusOr<ModelConfig> ParseConfig(const TextField& config_field, int index,
                                        absl::string_view file) {
  const Message config(config_field, file);
  TESSERA_RETURN_IF_ERROR(config.CheckFields(
      {"name", "base_path", "model_platform", "model_version_policy"},
      {"model_type", "version_labels", "logging_config", "servable_versions_always_present"}, {}));
  ModelConfig result;
  TESSERA_ASSIGN_OR_RETURN(const std::string* name, config.String("name"));
  TESSERA_ASSIGN_OR_RETURN(const std::string* base_path, config.String("base_path"));
  TESSERA_ASSIGN_OR_RETURN(const std::string* platform, config.String("model_platform"));
  const std::string which = absl::StrCat("config ", index + 1);
  if (name == nullptr) return config.Error(config_field, absl::StrCat(which, " has no name"));
  if (absl::Status status = CheckModelName(*name); !status.ok()) {
    return config.Error(*config.Find("name"), status.message());
  }
  if (base_path == nullptr || base_path->empty()) {
    return config.Error(config_field, absl::StrCat(which, " ('", *name, "') has no base_path"));
  }
  if (platform != nullptr && *platform != "tensorflow" && *platform != "tessera") {
    return config.Error(*config.Find("model_platform"),
                        absl::StrCat("model '", *name, "': model_platform '", *platform,
                                     "' is not served here (\"tensorflow\" or \"tessera\")"));
  }
  result.name = *name;
  result.base_path = *base_path;
  TESSERA_ASSIGN_OR_RETURN(const TextField* policy, config.Submessage("model_version_policy"));
  if (policy != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(result.policy, ParsePolicy(*policy, file));
  }
  return result;
}

}  // namespace

absl::Status CheckModelName(const std::string& name) {
  if (!name.empty() && name.find_first_of("/:") == std::string::npos) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model name '", name, "' must be non-empty and hold no '/' or ':'"));
}

absl::StatusOr<std::vector<ModelConfig>> ParseModelConfig(absl::string_view text,
                                                          absl::string_view file) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<TextField> top, TextParser(text, file).Parse());
  const TextField root{"the model config", 1, true, "", false, top};
  const Message server(root, file);
  TESSERA_RETURN_IF_ERROR(server.CheckFields({"model_config_list"}, {"custom_model_config"}, {}));
  TESSERA_ASSIGN_OR_RETURN(const TextField* list_field, server.Submessage("model_config_list"));
  if (list_field == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": no model_config_list { config { ... } }"));
  }
  const Message list(*list_field, file);
  TESSERA_RETURN_IF_ERROR(list.CheckFields({"config"}, {}, {"config"}));
  std::vector<ModelConfig> configs;
  std::map<std::string, int> lines;
  for (const TextField& config : list_field->fields) {
    if (!config.message) {
      return list.Error(config, "'config' must be a message: config { ... }");
    }
    TESSERA_ASSIGN_OR_RETURN(ModelConfig parsed,
                             ParseConfig(config, static_cast<int>(configs.size()), file));
    if (auto [it, inserted] = lines.emplace(parsed.name, config.line); !inserted) {
      return list.Error(config, absl::StrCat("a second model named '", parsed.name,
                                             "' (the first is at line ", it->second, ")"));
    }
    configs.push_back(std::move(parsed));
  }
  if (configs.empty()) {
    return list.Error(*list_field, "model_config_list has no config");
  }
  return configs;
}

absl::StatusOr<std::vector<ModelConfig>> ReadModelConfigFile(const std::string& path, Env* env) {
  absl::StatusOr<std::string> text = ReadFileBounded(*env, path, kMaxFileBytes);
  if (!text.ok()) {
    return absl::Status(
        text.status().code() == absl::StatusCode::kDataLoss ? absl::StatusCode::kInvalidArgument
                                                            : absl::StatusCode::kNotFound,
        absl::StrCat("cannot read the model config file: ", text.status().message()));
  }
  return ParseModelConfig(*text, path);
}

}  // namespace tessera::serving
