#include "cmdpolicy/internal/shell.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "common/text.h"
#include "fmt/format.h"

namespace airlock::cmdpolicy::internal {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// Characters that end an unquoted word.
bool IsDelimiter(char c) {
  return IsBlank(c) || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' || c == '>' ||
         c == '(' || c == ')';
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Special parameters after '$': $1, $@, $*, $#, $?, $-, $$, $!, $0.
bool IsSpecialParameter(char c) {
  return IsDigit(c) || c == '@' || c == '*' || c == '#' || c == '?' || c == '-' || c == '$' ||
         c == '!';
}

// $'...' escapes that stand for one byte: \a \b \e \E \f \n \r \t \v.
constexpr char kSimpleEscapes[] = "abeEfnrtv";
constexpr char kSimpleEscapeValues[] = "\a\b\x1b\x1b\f\n\r\t\v";

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp > 0x10FFFF) cp = 0xFFFD;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Where a list ends: at end of text, at an unmatched ')', at ";;"-style case terminators, or
// at one of `words` in command position.
struct Stop {
  bool paren = false;
  bool case_item = false;
  std::initializer_list<std::string_view> words;
};

class Parser {
 public:
  Parser(std::string_view text, size_t depth, std::vector<std::string>* problems)
      : t_(text), depth_(depth), problems_(problems) {}

  Script ParseAll() {
    Script script = ParseList(Stop{});
    return script;
  }

 private:
  bool AtEnd() const { return pos_ >= t_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }
  bool LookingAt(std::string_view s) const { return t_.substr(pos_, s.size()) == s; }

  void Problem(std::string what) { ProblemAt(std::move(what), pos_); }

  void ProblemAt(std::string what, size_t at) {
    // Bounded: a text made of thousands of broken constructs reports the first few. After
    // giving up on the rest of the text, the unclosed constructs around it say nothing more.
    constexpr size_t kMaxProblems = 16;
    if (gave_up_ || problems_->size() >= kMaxProblems) return;
    problems_->push_back(fmt::format("{} at byte {}", what, at + base_));
  }

  // Nesting guard for every construct that recurses. On overflow the rest of the text is not
  // parsed (and the problem says so).
  bool Enter() {
    if (depth_ >= kMaxShellDepth) {
      Problem(
          fmt::format("nesting deeper than {} levels; the rest was not parsed", kMaxShellDepth));
      gave_up_ = true;
      pos_ = t_.size();
      return false;
    }
    ++depth_;
    return true;
  }
  void Leave() { --depth_; }

  void ConsumeNewline() {
    ++pos_;
    if (heredoc_pending_ && pos_ - 1 == heredoc_line_end_) {
      pos_ = heredoc_resume_;
      heredoc_pending_ = false;
    }
  }

  void SkipBlanks() {
    while (!AtEnd()) {
      if (IsBlank(Peek())) {
        ++pos_;
      } else if (Peek() == '\\' && Peek(1) == '\n') {
        pos_ += 2;
      } else {
        break;
      }
    }
  }

  // Blanks, newlines and comments.
  void SkipSpace() {
    while (!AtEnd()) {
      SkipBlanks();
      if (Peek() == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else if (Peek() == '\n') {
        ConsumeNewline();
      } else {
        break;
      }
    }
  }

  // The unquoted word at pos_ if it could be a reserved word ("if", "{", "]]", ...); empty
  // otherwise. Nothing is consumed.
  std::string_view PeekKeyword() const {
    size_t end = pos_;
    while (end < t_.size() && !IsDelimiter(t_[end])) {
      char c = t_[end];
      if (!((c >= 'a' && c <= 'z') || c == '{' || c == '}' || c == '[' || c == ']' || c == '!')) {
        return {};
      }
      ++end;
    }
    return t_.substr(pos_, end - pos_);
  }

  bool ConsumeKeyword(std::string_view keyword) {
    if (PeekKeyword() != keyword) return false;
    pos_ += keyword.size();
    return true;
  }

  void ExpectKeyword(std::string_view keyword) {
    SkipSpace();
    while (!AtEnd() && (Peek() == ';' && Peek(1) != ';')) {
      ++pos_;
      SkipSpace();
    }
    if (!ConsumeKeyword(keyword)) Problem(fmt::format("missing \"{}\"", keyword));
  }

  bool AtStop(const Stop& stop) const {
    if (AtEnd()) return true;
    if (stop.paren && Peek() == ')') return true;
    if (stop.case_item && (LookingAt(";;") || LookingAt(";&"))) return true;
    if (stop.words.size() > 0) {
      std::string_view keyword = PeekKeyword();
      for (std::string_view w : stop.words) {
        if (!keyword.empty() && keyword == w) return true;
      }
    }
    return false;
  }

  Script ParseList(const Stop& stop) {
    Script script;
    while (true) {
      SkipSpace();
      while (Peek() == ';' && !LookingAt(";;") && !LookingAt(";&")) {
        ++pos_;
        SkipSpace();
      }
      if (AtStop(stop)) break;
      const size_t before = pos_;
      if (Peek() == ')' || LookingAt(";;") || LookingAt(";&") ||
          (Peek() == '&' && Peek(1) != '>') || Peek() == '|') {
        Problem(fmt::format("unexpected \"{}\"", Peek()));
        ++pos_;
        continue;
      }
      Pipeline pipeline = ParsePipeline(stop);
      if (!pipeline.stages.empty()) script.pipelines.push_back(std::move(pipeline));
      SkipBlanks();
      if (LookingAt("&&") || LookingAt("||")) {
        pos_ += 2;
      } else if (Peek() == ';' && !LookingAt(";;") && !LookingAt(";&")) {
        ++pos_;
      } else if (Peek() == '&') {
        ++pos_;
      }
      if (pos_ == before) {
        // Nothing consumed: a construct this parser does not know. Skip a byte so the parse
        // always ends.
        Problem(fmt::format("unexpected \"{}\"", Peek()));
        ++pos_;
      }
    }
    return script;
  }

  Pipeline ParsePipeline(const Stop& stop) {
    Pipeline pipeline;
    SkipBlanks();
    while (ConsumeKeyword("!") || ConsumeKeyword("time")) {
      SkipBlanks();
      if (LookingAt("-p ")) pos_ += 3;
      SkipBlanks();
    }
    while (true) {
      Command command = ParseCommand(stop);
      const bool empty = !command.compound && command.words.empty() &&
                         command.assignments.empty() && command.redirects.empty();
      if (empty) break;
      pipeline.stages.push_back(std::move(command));
      SkipBlanks();
      if (LookingAt("|&")) {
        pos_ += 2;
      } else if (Peek() == '|' && Peek(1) != '|') {
        ++pos_;
      } else {
        break;
      }
      SkipSpace();
    }
    return pipeline;
  }

  Command ParseCommand(const Stop& stop) {
    SkipBlanks();
    Command command;
    if (AtEnd() || AtStop(stop)) return command;
    if (ParseCompound(&command)) {
      while (true) {
        SkipBlanks();
        if (!TryRedirect(&command)) break;
      }
      return command;
    }
    while (true) {
      SkipBlanks();
      if (AtEnd()) break;
      if (TryRedirect(&command)) continue;
      char c = Peek();
      if (c == '\n' || c == ';' || c == '&' || c == '|' || c == ')') break;
      if (c == '#') {  // a comment runs to the end of the line
        while (!AtEnd() && Peek() != '\n') ++pos_;
        continue;
      }
      if (c == '(') {
        if (command.words.size() == 1 && command.assignments.empty() && TryFunction(&command)) {
          break;
        }
        Problem("unexpected \"(\"");
        ++pos_;
        continue;
      }
      Word word;
      bool assignment = false;
      const size_t before = pos_;
      ReadWord(&word, &assignment);
      if (pos_ == before) {
        Problem(fmt::format("unexpected \"{}\"", c));
        ++pos_;
        continue;
      }
      if (assignment && command.words.empty()) {
        command.assignments.push_back(std::move(word));
      } else {
        command.words.push_back(std::move(word));
      }
    }
    return command;
  }

  // `name ( ) compound-command`, at the "(" after the name.
  bool TryFunction(Command* command) {
    size_t p = pos_ + 1;
    while (p < t_.size() && IsBlank(t_[p])) ++p;
    if (p >= t_.size() || t_[p] != ')') return false;
    pos_ = p + 1;
    SkipSpace();
    Command body;
    if (!ParseCompound(&body)) {
      Problem("function body is not a compound command");
      return true;
    }
    command->compound = true;
    command->data = std::move(command->words);
    command->words.clear();
    command->body.push_back(Script{{Pipeline{{std::move(body)}}}});
    return true;
  }

  // Compound commands and the other reserved words at command position.
  bool ParseCompound(Command* command) {
    if (LookingAt("((")) {
      command->compound = true;
      pos_ += 2;
      Word data;
      ReadBalanced('(', ')', 2, &data);
      command->data.push_back(std::move(data));
      return true;
    }
    if (Peek() == '(') {
      ++pos_;
      command->compound = true;
      if (!Enter()) return true;
      command->body.push_back(ParseList(Stop{.paren = true}));
      Leave();
      if (Peek() == ')') {
        ++pos_;
      } else {
        Problem("missing \")\"");
      }
      return true;
    }
    const std::string_view keyword = PeekKeyword();
    if (keyword.empty()) return false;
    if (keyword == "{") {
      pos_ += 1;
      command->compound = true;
      if (!Enter()) return true;
      command->body.push_back(ParseList(Stop{.words = {"}"}}));
      Leave();
      ExpectKeyword("}");
      return true;
    }
    if (keyword == "if") {
      pos_ += 2;
      command->compound = true;
      if (!Enter()) return true;
      command->body.push_back(ParseList(Stop{.words = {"then"}}));
      ExpectKeyword("then");
      command->body.push_back(ParseList(Stop{.words = {"elif", "else", "fi"}}));
      while (true) {
        SkipSpace();
        if (ConsumeKeyword("elif")) {
          command->body.push_back(ParseList(Stop{.words = {"then"}}));
          ExpectKeyword("then");
          command->body.push_back(ParseList(Stop{.words = {"elif", "else", "fi"}}));
        } else if (ConsumeKeyword("else")) {
          command->body.push_back(ParseList(Stop{.words = {"fi"}}));
        } else {
          break;
        }
      }
      Leave();
      ExpectKeyword("fi");
      return true;
    }
    if (keyword == "while" || keyword == "until") {
      pos_ += keyword.size();
      command->compound = true;
      if (!Enter()) return true;
      command->body.push_back(ParseList(Stop{.words = {"do"}}));
      ExpectKeyword("do");
      command->body.push_back(ParseList(Stop{.words = {"done"}}));
      Leave();
      ExpectKeyword("done");
      return true;
    }
    if (keyword == "for" || keyword == "select") {
      pos_ += keyword.size();
      command->compound = true;
      ParseForHead(command);
      if (!Enter()) return true;
      SkipSpace();
      if (ConsumeKeyword("do")) {
        command->body.push_back(ParseList(Stop{.words = {"done"}}));
        Leave();
        ExpectKeyword("done");
      } else if (PeekKeyword() == "{") {
        Command group;
        ParseCompound(&group);
        command->body.push_back(Script{{Pipeline{{std::move(group)}}}});
        Leave();
      } else {
        Leave();
        Problem("missing \"do\"");
      }
      return true;
    }
    if (keyword == "case") {
      pos_ += 4;
      command->compound = true;
      ParseCase(command);
      return true;
    }
    if (keyword == "function") {
      pos_ += 8;
      SkipBlanks();
      Word name;
      bool unused = false;
      ReadWord(&name, &unused);
      command->compound = true;
      command->data.push_back(std::move(name));
      SkipBlanks();
      if (LookingAt("()")) pos_ += 2;
      SkipSpace();
      Command body;
      if (!ParseCompound(&body)) {
        Problem("function body is not a compound command");
        return true;
      }
      command->body.push_back(Script{{Pipeline{{std::move(body)}}}});
      return true;
    }
    if (keyword == "[[") {
      pos_ += 2;
      command->compound = true;
      ParseConditional(command);
      return true;
    }
    return false;
  }

  void ParseForHead(Command* command) {
    SkipBlanks();
    if (LookingAt("((")) {
      pos_ += 2;
      Word data;
      ReadBalanced('(', ')', 2, &data);
      command->data.push_back(std::move(data));
      return;
    }
    Word name;
    bool unused = false;
    ReadWord(&name, &unused);
    command->data.push_back(std::move(name));
    SkipSpace();
    if (!ConsumeKeyword("in")) return;
    while (true) {
      SkipBlanks();
      if (AtEnd() || Peek() == ';' || Peek() == '\n') break;
      ReadDataWord(command, "");
    }
    while (Peek() == ';') ++pos_;
  }

  // Reads one word (a `for` item, a case pattern) into command->data. A character no word can
  // start with is a problem, named with `where`, and skipped.
  void ReadDataWord(Command* command, std::string_view where) {
    Word word;
    bool unused = false;
    const size_t before = pos_;
    ReadWord(&word, &unused);
    if (pos_ == before) {
      Problem(fmt::format("unexpected \"{}\"{}", Peek(), where));
      ++pos_;
      return;
    }
    command->data.push_back(std::move(word));
  }

  void ParseCase(Command* command) {
    SkipBlanks();
    Word subject;
    bool unused = false;
    ReadWord(&subject, &unused);
    command->data.push_back(std::move(subject));
    SkipSpace();
    if (!ConsumeKeyword("in")) Problem("missing \"in\"");
    if (!Enter()) return;
    while (true) {
      SkipSpace();
      if (AtEnd()) {
        Problem("missing \"esac\"");
        break;
      }
      if (ConsumeKeyword("esac")) break;
      if (Peek() == '(') ++pos_;
      // The patterns, separated by '|', up to ')'.
      while (true) {
        SkipBlanks();
        if (AtEnd() || Peek() == '\n') {
          Problem("missing \")\" after a case pattern");
          break;
        }
        if (Peek() == ')') {
          ++pos_;
          break;
        }
        if (Peek() == '|') {
          ++pos_;
          continue;
        }
        ReadDataWord(command, " in a case pattern");
      }
      command->body.push_back(ParseList(Stop{.case_item = true, .words = {"esac"}}));
      if (LookingAt(";;&")) {
        pos_ += 3;
      } else if (LookingAt(";;") || LookingAt(";&")) {
        pos_ += 2;
      }
    }
    Leave();
  }

  // [[ expression ]]: words and operators up to "]]"; none of them is a command.
  void ParseConditional(Command* command) {
    bool unused = false;
    while (true) {
      SkipBlanks();
      if (AtEnd()) {
        Problem("missing \"]]\"");
        return;
      }
      if (ConsumeKeyword("]]")) return;
      char c = Peek();
      if (c == '\n') {
        ConsumeNewline();
        continue;
      }
      if (c == '&' || c == '|' || c == '<' || c == '>' || c == '(' || c == ')' || c == ';') {
        ++pos_;
        continue;
      }
      Word word;
      const size_t before = pos_;
      ReadWord(&word, &unused);
      if (pos_ == before) ++pos_;
      command->data.push_back(std::move(word));
    }
  }

  bool TryRedirect(Command* command) {
    size_t p = pos_;
    while (p < t_.size() && IsDigit(t_[p])) ++p;
    std::string_view rest = t_.substr(p);
    if (rest.empty()) return false;
    if (p > pos_ && rest[0] != '<' && rest[0] != '>') return false;
    static constexpr std::string_view kOps[] = {"&>>", "&>", ">>", ">|", ">&", "<<<",
                                                "<<-", "<<", "<>", "<&", ">",  "<"};
    std::string_view op;
    for (std::string_view candidate : kOps) {
      if (rest.substr(0, candidate.size()) == candidate) {
        op = candidate;
        break;
      }
    }
    if (op.empty()) return false;
    // <(...) and >(...) are process substitutions, words rather than redirections.
    if ((op == "<" || op == ">") && rest.size() > 1 && rest[1] == '(') return false;
    if (p > pos_ && op[0] == '&') return false;
    pos_ = p + op.size();
    SkipBlanks();
    Redirect redirect;
    redirect.op = std::string(op);
    bool unused = false;
    const size_t target_start = pos_;
    ReadWord(&redirect.target, &unused);
    if (pos_ == target_start) Problem(fmt::format("missing the target of \"{}\"", op));
    if (op == "<<" || op == "<<-") {
      const std::string_view raw = t_.substr(target_start, pos_ - target_start);
      const bool quoted = raw.find_first_of("'\"\\") != std::string_view::npos;
      ReadHeredoc(redirect.target.text, op == "<<-", quoted, &redirect);
    }
    command->redirects.push_back(std::move(redirect));
    return true;
  }

  // The body of a here-document starts on the line after the current one (after the bodies of
  // earlier here-documents of the same line) and ends at a line equal to the delimiter; the
  // parser jumps over it when it reaches the end of the current line.
  void ReadHeredoc(const std::string& delimiter, bool strip_tabs, bool quoted, Redirect* redirect) {
    size_t start;
    if (heredoc_pending_) {
      start = heredoc_resume_;
    } else {
      size_t line_end = t_.find('\n', pos_);
      if (line_end == std::string_view::npos) {
        Problem(fmt::format("here-document \"{}\" has no body", delimiter));
        return;
      }
      heredoc_line_end_ = line_end;
      start = line_end + 1;
    }
    size_t line = start;
    size_t body_end = t_.size();
    size_t resume = t_.size();
    bool found = false;
    while (line < t_.size()) {
      size_t eol = t_.find('\n', line);
      if (eol == std::string_view::npos) eol = t_.size();
      std::string_view text = t_.substr(line, eol - line);
      if (strip_tabs) {
        while (!text.empty() && text.front() == '\t') text.remove_prefix(1);
      }
      if (text == delimiter) {
        body_end = line;
        resume = eol < t_.size() ? eol + 1 : eol;
        found = true;
        break;
      }
      line = eol + 1;
    }
    if (!found) Problem(fmt::format("unterminated here-document \"{}\"", delimiter));
    redirect->heredoc = std::string(t_.substr(start, body_end - start));
    if (!quoted && Enter()) {
      Word expansions;
      Parser sub(redirect->heredoc, depth_, problems_);
      sub.base_ = base_ + start;
      sub.ReadExpansionText(&expansions);
      redirect->heredoc_substitutions = std::move(expansions.substitutions);
      Leave();
    }
    heredoc_pending_ = true;
    heredoc_resume_ = resume;
  }

  // The whole text as the inside of a here-document: only expansions are special.
  void ReadExpansionText(Word* word) {
    while (!AtEnd()) {
      char c = Peek();
      if (c == '\\' && pos_ + 1 < t_.size()) {
        pos_ += 2;
      } else if (c == '$') {
        ReadDollar(word, /*quoted=*/true);
      } else if (c == '`') {
        ReadBackquote(word, /*in_double=*/true);
      } else {
        ++pos_;
      }
    }
  }

  // One word: quotes removed, expansions kept as written. `*assignment` says whether it starts
  // with an unquoted NAME= (or NAME+=).
  void ReadWord(Word* word, bool* assignment) {
    *assignment = false;
    const size_t start = pos_;
    bool name_so_far = true;  // unquoted name characters only, since start
    if (LookingAt("<(") || LookingAt(">(")) {
      word->process_substitution = true;
      word->literal = false;
      pos_ += 2;
      ReadSubstitution(word, start);
      return;
    }
    while (!AtEnd()) {
      char c = Peek();
      if (c == '\\') {
        if (Peek(1) == '\n') {
          pos_ += 2;
        } else if (pos_ + 1 < t_.size()) {
          word->text.push_back(Peek(1));
          pos_ += 2;
        } else {
          word->text.push_back('\\');
          ++pos_;
        }
        name_so_far = false;
        continue;
      }
      if (c == '(' && !word->text.empty()) {
        const char before = word->text.back();
        if (*assignment && before == '=') {
          // NAME=(a b c): an array; its words are data.
          word->text.push_back('(');
          ++pos_;
          ReadBalanced('(', ')', 1, word);
          continue;
        }
        if (before == '@' || before == '!' || before == '+' || before == '*' || before == '?') {
          word->text.push_back('(');  // extglob: @(a|b)
          ++pos_;
          ReadBalanced('(', ')', 1, word);
          continue;
        }
      }
      if (IsDelimiter(c)) break;
      if (c == '=' && name_so_far && pos_ > start) {
        *assignment = true;
        name_so_far = false;
        word->text.push_back(c);
        ++pos_;
        continue;
      }
      if (c == '+' && Peek(1) == '=' && name_so_far && pos_ > start) {
        *assignment = true;
        name_so_far = false;
        word->text += "+=";
        pos_ += 2;
        continue;
      }
      if (name_so_far && !(pos_ == start ? IsNameStart(c) : IsNameChar(c))) name_so_far = false;
      if (c == '\'') {
        const size_t open = pos_++;
        size_t end = t_.find('\'', pos_);
        if (end == std::string_view::npos) {
          ProblemAt("unterminated single quote", open);
          end = t_.size();
        }
        word->text.append(t_.substr(pos_, end - pos_));
        pos_ = end < t_.size() ? end + 1 : end;
        continue;
      }
      if (c == '"') {
        ++pos_;
        ReadDouble(word);
        continue;
      }
      if (c == '$') {
        ReadDollar(word);
        continue;
      }
      if (c == '`') {
        ReadBackquote(word, /*in_double=*/false);
        continue;
      }
      word->text.push_back(c);
      ++pos_;
    }
  }

  // Inside "...", after the opening quote.
  void ReadDouble(Word* word) {
    const size_t open = pos_ - 1;
    while (true) {
      if (AtEnd()) {
        ProblemAt("unterminated double quote", open);
        return;
      }
      char c = Peek();
      if (c == '"') {
        ++pos_;
        return;
      }
      if (c == '\\') {
        char next = Peek(1);
        if (next == '\n') {
          pos_ += 2;
        } else if (next == '$' || next == '`' || next == '"' || next == '\\') {
          word->text.push_back(next);
          pos_ += 2;
        } else {
          word->text.push_back('\\');
          ++pos_;
        }
        continue;
      }
      if (c == '$') {
        ReadDollar(word, /*quoted=*/true);
        continue;
      }
      if (c == '`') {
        ReadBackquote(word, /*in_double=*/true);
        continue;
      }
      word->text.push_back(c);
      ++pos_;
    }
  }

  // At '$': a parameter, a substitution, an arithmetic expansion, $'...' or $"..." (those two
  // only outside double quotes and here-documents, where the '$' is literal).
  void ReadDollar(Word* word, bool quoted = false) {
    const size_t start = pos_;
    char next = Peek(1);
    if (quoted && (next == '\'' || next == '"')) {
      word->text.push_back('$');
      ++pos_;
      return;
    }
    if (next == '\'') {
      pos_ += 2;
      ReadAnsiC(word);
      return;
    }
    if (next == '"') {
      pos_ += 2;
      ReadDouble(word);
      return;
    }
    if (next == '(' && Peek(2) == '(') {
      word->literal = false;
      pos_ += 3;
      word->text += "$((";
      ReadBalanced('(', ')', 2, word);
      return;
    }
    if (next == '(') {
      word->literal = false;
      pos_ += 2;
      ReadSubstitution(word, start);
      return;
    }
    if (next == '{') {
      word->literal = false;
      pos_ += 2;
      word->text += "${";
      ReadBalanced('{', '}', 1, word);
      return;
    }
    if (next == '[') {  // $[ ... ]: old arithmetic
      word->literal = false;
      pos_ += 2;
      word->text += "$[";
      ReadBalanced('[', ']', 1, word);
      return;
    }
    if (IsNameStart(next)) {
      word->literal = false;
      size_t end = pos_ + 1;
      while (end < t_.size() && IsNameChar(t_[end])) ++end;
      word->text.append(t_.substr(pos_, end - pos_));
      pos_ = end;
      return;
    }
    if (IsSpecialParameter(next)) {
      word->literal = false;
      word->text.append(t_.substr(pos_, 2));
      pos_ += 2;
      return;
    }
    word->text.push_back('$');
    ++pos_;
  }

  // After "$(" or "<(" / ">(" (which start at `start`): the command list up to the matching ")".
  void ReadSubstitution(Word* word, size_t start) {
    if (!Enter()) return;
    Script inner = ParseList(Stop{.paren = true});
    Leave();
    if (Peek() == ')') {
      ++pos_;
    } else {
      ProblemAt("unterminated command substitution", start);
    }
    word->text.append(t_.substr(start, pos_ - start));
    word->substitutions.push_back(std::move(inner));
  }

  // `...`: the text between the backquotes, unescaped, parsed as a script of its own.
  void ReadBackquote(Word* word, bool in_double) {
    word->literal = false;
    const size_t start = pos_;
    ++pos_;
    std::string inner;
    bool closed = false;
    while (!AtEnd()) {
      char c = Peek();
      if (c == '`') {
        ++pos_;
        closed = true;
        break;
      }
      if (c == '\\' && pos_ + 1 < t_.size()) {
        char next = Peek(1);
        if (next == '`' || next == '\\' || next == '$' || (in_double && next == '"')) {
          inner.push_back(next);
          pos_ += 2;
          continue;
        }
      }
      inner.push_back(c);
      ++pos_;
    }
    if (!closed) ProblemAt("unterminated backquote", start);
    word->text.append(t_.substr(start, pos_ - start));
    if (!Enter()) return;
    Parser sub(inner, depth_, problems_);
    sub.base_ = base_ + start + 1;
    word->substitutions.push_back(sub.ParseAll());
    Leave();
  }

  // $'...' after the opening quote: backslash escapes as bash decodes them.
  void ReadAnsiC(Word* word) {
    while (true) {
      if (AtEnd()) {
        Problem("unterminated $'...' quote");
        return;
      }
      char c = Peek();
      ++pos_;
      if (c == '\'') return;
      if (c != '\\' || AtEnd()) {
        word->text.push_back(c);
        continue;
      }
      char e = Peek();
      ++pos_;
      if (const char* simple = std::strchr(kSimpleEscapes, e); simple != nullptr && e != '\0') {
        word->text.push_back(kSimpleEscapeValues[simple - kSimpleEscapes]);
        continue;
      }
      switch (e) {
        case 'c':
          if (!AtEnd()) {
            word->text.push_back(static_cast<char>(Peek() & 0x1f));
            ++pos_;
          }
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t max_digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t value = 0;
          size_t n = 0;
          while (n < max_digits && !AtEnd() && HexDigitValue(Peek()) >= 0) {
            value = value * 16 + static_cast<uint32_t>(HexDigitValue(Peek()));
            ++pos_;
            ++n;
          }
          if (n == 0) {
            word->text.push_back('\\');
            word->text.push_back(e);
          } else if (e == 'x') {
            word->text.push_back(static_cast<char>(value));
          } else {
            AppendUtf8(value, &word->text);
          }
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t value = static_cast<uint32_t>(e - '0');
            for (int n = 1; n < 3 && !AtEnd() && Peek() >= '0' && Peek() <= '7'; ++n) {
              value = value * 8 + static_cast<uint32_t>(Peek() - '0');
              ++pos_;
            }
            word->text.push_back(static_cast<char>(value & 0xff));
          } else {
            // \\ \' \" \? and unknown escapes: the character itself (unknown ones keep the
            // backslash, as bash does).
            if (e != '\\' && e != '\'' && e != '"' && e != '?') word->text.push_back('\\');
            word->text.push_back(e);
          }
      }
    }
  }

  // Raw text up to the close that balances `open_count` opens already consumed, appended to
  // the word as written; substitutions inside are parsed. Used for ${...}, $((...)), arrays,
  // extglobs and for ((...)).
  void ReadBalanced(char open, char close, int open_count, Word* word) {
    if (!Enter()) return;
    ReadBalancedText(open, close, open_count, word);
    Leave();
  }

  void ReadBalancedText(char open, char close, int open_count, Word* word) {
    int depth = open_count;
    while (true) {
      if (AtEnd()) {
        Problem(fmt::format("missing \"{}\"", close));
        return;
      }
      char c = Peek();
      if (c == '\\' && pos_ + 1 < t_.size()) {
        word->text.append(t_.substr(pos_, 2));
        pos_ += 2;
        continue;
      }
      if (c == '\'') {
        size_t end = t_.find('\'', pos_ + 1);
        if (end == std::string_view::npos) end = t_.size() - 1;
        word->text.append(t_.substr(pos_, end + 1 - pos_));
        pos_ = end + 1;
        continue;
      }
      if (c == '"') {
        ++pos_;
        Word inner;
        ReadDouble(&inner);
        word->text += '"' + inner.text + '"';
        for (Script& s : inner.substitutions) word->substitutions.push_back(std::move(s));
        continue;
      }
      if (c == '$') {
        ReadDollar(word);
        continue;
      }
      if (c == '`') {
        ReadBackquote(word, /*in_double=*/false);
        continue;
      }
      if (c == '\n') {
        word->text.push_back(c);
        ConsumeNewline();
        continue;
      }
      ++pos_;
      word->text.push_back(c);
      if (c == open) {
        ++depth;
      } else if (c == close && --depth == 0) {
        return;
      }
    }
  }

 public:
  size_t base_ = 0;  // offset of t_ in the outermost text, for messages

 private:
  std::string_view t_;
  size_t pos_ = 0;
  size_t depth_;
  std::vector<std::string>* problems_;
  bool gave_up_ = false;
  bool heredoc_pending_ = false;
  size_t heredoc_line_end_ = 0;
  size_t heredoc_resume_ = 0;
};

}  // namespace

ShellParse ParseShell(std::string_view text) {
  ShellParse parse;
  if (text.size() > kMaxShellBytes) {
    parse.problems.push_back(fmt::format("shell text of {} bytes; only the first {} were parsed",
                                         text.size(), kMaxShellBytes));
    text = text.substr(0, kMaxShellBytes);
  }
  Parser parser(text, 0, &parse.problems);
  parse.script = parser.ParseAll();
  return parse;
}

std::string QuoteWord(std::string_view word) {
  static constexpr std::string_view kReserved[] = {
      "if",  "then", "else",   "elif",     "fi",   "do", "done", "case", "esac", "while", "until",
      "for", "in",   "select", "function", "time", "!",  "{",    "}",    "[[",   "]]"};
  bool plain = !word.empty();
  for (std::string_view reserved : kReserved) plain = plain && word != reserved;
  for (char c : word) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '@' || c == '%' || c == '+' || c == ':' || c == ',' || c == '.' ||
                c == '/' || c == '-';
    plain = plain && safe;
  }
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

}  // namespace airlock::cmdpolicy::internal
