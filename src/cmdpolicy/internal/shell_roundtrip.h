// A property of the shell parser shared by its test and its fuzzer: the simple commands it
// finds at the top level, written back with every word quoted, parse to the same words.
#ifndef AIRLOCK_CMDPOLICY_INTERNAL_SHELL_ROUNDTRIP_H_
#define AIRLOCK_CMDPOLICY_INTERNAL_SHELL_ROUNDTRIP_H_

#include <string>
#include <vector>

#include "cmdpolicy/internal/shell.h"

namespace airlock::cmdpolicy::internal {

// The assignments and words of each simple command of the script's own pipelines (not inside
// compound commands or substitutions), in order.
inline std::vector<std::vector<std::string>> TopLevelCommands(const Script& script) {
  std::vector<std::vector<std::string>> out;
  for (const Pipeline& p : script.pipelines) {
    for (const Command& c : p.stages) {
      if (c.compound) continue;
      std::vector<std::string> words;
      for (const Word& w : c.assignments) words.push_back(w.text);
      for (const Word& w : c.words) words.push_back(w.text);
      if (!words.empty()) out.push_back(std::move(words));
    }
  }
  return out;
}

// The commands as shell text, one per line: assignments as NAME='value', words quoted.
inline std::string Requote(const std::vector<std::vector<std::string>>& commands) {
  std::string text;
  for (const std::vector<std::string>& words : commands) {
    bool leading = true;
    for (const std::string& w : words) {
      size_t eq = w.find('=');
      bool assignment = leading && eq != std::string::npos && eq > 0;
      for (size_t i = 0; assignment && i < eq; ++i) {
        char c = w[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (i > 0 && c >= '0' && c <= '9') || (c == '+' && i + 1 == eq && i > 0);
        assignment = ok;
      }
      if (!assignment) leading = false;
      text += assignment ? w.substr(0, eq + 1) + QuoteWord(w.substr(eq + 1)) : QuoteWord(w);
      text += ' ';
    }
    text += '\n';
  }
  return text;
}

}  // namespace airlock::cmdpolicy::internal

#endif  // AIRLOCK_CMDPOLICY_INTERNAL_SHELL_ROUNDTRIP_H_
