// Mangle: the byte-level fuzzing the request and config parser tests share. Each of `edits`
// edits replaces, inserts or erases one byte at a random place (an inserted or replacing byte is
// drawn from `alphabet`); an empty text is left alone. The draws from `random` come in a fixed
// order, so a seed always gives the same texts.
//
//   std::mt19937 random(7);
//   const std::string body = Mangle(valid, 1 + static_cast<int>(random() % 4), random, "{}[]\":,");
#pragma once

#include <random>
#include <string>

namespace tessera {

inline std::string Mangle(std::string text, int edits, std::mt19937& random,
                          const std::string& alphabet) {
  for (int e = 0; e < edits && !text.empty(); ++e) {
    const size_t at = random() % text.size();
    const char c = alphabet[random() % alphabet.size()];
    switch (random() % 3) {
      case 0:
        text[at] = c;
        break;
      case 1:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
        break;
      default:
        text.erase(at, 1);
    }
  }
  return text;
}

}  // namespace tessera
