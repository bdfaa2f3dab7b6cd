#include "command/internal/output_rules.h"

namespace airlock::command_internal {
namespace {

using S = Signal;
using R = Role;
using T = Tier;

// Host names, module names and paths in the patterns below.
#define AIRLOCK_HOST R"re([A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9])re"

constexpr LineRule kRules[] = {
    // Lines that look like failures and are not.
    {S::kIgnore, R::kLine, T::kSignal, R"re(^npm (?:ERR!|error) +A complete log of this run)re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^npm (?:ERR!|error) +/\S+\.log$)re"},
    {S::kIgnore, R::kLine, T::kSignal,
     R"re(^\[ERROR\] *(?:$|-> \[Help|\[Help \d|To see the full|Re-run Maven|For more information))re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^\[(?:INFO|WARNING|WARN|DEBUG)\] )re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(Tests run: \d+, Failures: 0, Errors: 0)re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^# (?:fail|cancelled|todo) 0$)re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^\S+:\d+:(?:\d+:)? (?:warning|note): )re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^ *● Console$)re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^\[ERROR\] (?:Failures|Errors): *$)re"},
    {S::kIgnore, R::kLine, T::kSignal, R"re(^\[ERROR\] Please refer to )re"},
    {S::kIgnore, R::kLine, T::kSignal,
     R"re(^npm (?:ERR!|error)(?: 404| network)? *$|^npm (?:ERR!|error) (?:404|network) +)re"
     R"re((?:Note that|tarball, folder|This is a problem|In most cases|If you are behind))re"},

    // Network required. The host, where the line names it.
    {S::kNetwork, R::kLine, T::kKey,
     R"re(Could not resolve host(?:name)?:? +'?(?P<detail>)re" AIRLOCK_HOST R"re())re"},
    {S::kNetwork, R::kLine, T::kKey,
     R"re(getaddrinfo (?:ENOTFOUND|EAI_AGAIN) (?P<detail>)re" AIRLOCK_HOST R"re())re"},
    {S::kNetwork, R::kLine, T::kKey,
     R"re(Unknown ?[Hh]ost(?:Exception)?:? (?P<detail>)re" AIRLOCK_HOST R"re())re"},
    {S::kNetwork, R::kLine, T::kKey,
     R"re(lookup (?P<detail>)re" AIRLOCK_HOST
     R"re()(?: on \S+)?: (?:no such host|server misbehaving|i/o timeout))re"},
    {S::kNetwork, R::kLine, T::kKey,
     R"re(Temporary failure in name resolution|Name or service not known|nodename nor servname )re"
     R"re(provided|[Nn]etwork is unreachable|ENETUNREACH|No route to host|EHOSTUNREACH|)re"
     R"re(Failed to establish a new connection|EAI_AGAIN|ENOTFOUND)re"},

    // Missing dependency.
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(ModuleNotFoundError: No module named '(?P<detail>[^']+)')re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(ImportError: No module named '?(?P<detail>[\w.]+))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(Cannot find (?:module|package) '(?P<detail>[^']+)')re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(fatal error: (?P<detail>[^:' ]+): No such file or directory)re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(fatal error: '(?P<detail>[^']+)' file not found)re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(package (?P<detail>[\w./\-]+) is not in (?:GOROOT|std))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re((?:no required module provides|cannot find module providing) package )re"
     R"re((?P<detail>[\w./\-]+))re"},
    {S::kMissingDependency, R::kLine, T::kKey, R"re(cannot find package "(?P<detail>[^"]+)")re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(^npm (?:ERR!|error) 404 +(?:The requested resource )?'(?P<detail>[^']+)' (?:is not in )re"
     R"re((?:the npm|this) registry|could not be found))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(^npm (?:ERR!|error) 404 Not Found - [A-Z]+ https?://[^/ ]+/(?P<detail>[^ ]+))re"},
    {S::kMissingDependency, R::kLine, T::kSignal, R"re(^npm (?:ERR!|error) code E404$)re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(No matching (?:version|distribution) found for (?P<detail>[^ ,]+))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(Could not find a version that satisfies the requirement (?P<detail>[^ ,]+))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re((?:Could not find artifact|Failure to find) (?P<detail>[\w.\-]+:[\w.\-:]+))re"},
    {S::kMissingDependency, R::kLine, T::kContext,
     R"re(Could not resolve dependencies for project|Could not resolve all (?:files|)re"
     R"re(dependencies) for configuration)re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(Could not (?:find|resolve) (?P<detail>[\w.\-]+:[\w.\-]+:[\w.\-]*[\w\-]))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(error: package (?P<detail>[\w.]+) does not exist)re"},
    {S::kMissingDependency, R::kLine, T::kKey, R"re(cannot find (?P<detail>-l[\w.+\-]+))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(error while loading shared libraries: (?P<detail>[^: ]+):)re"},
    {S::kMissingDependency, R::kLine, T::kKey, R"re(Could NOT find (?P<detail>[\w\-]+))re"},
    {S::kMissingDependency, R::kLine, T::kKey,
     R"re(^(?:Package '?(?P<detail>[\w.+\-]+)'?,? was not found|No package '[^']+' found))re"},
    {S::kMissingDependency, R::kLine, T::kKey, R"re(cannot load such file -- (?P<detail>\S+))re"},
    {S::kMissingDependency, R::kLine, T::kKey, R"re(can't find crate for `(?P<detail>\w+)`)re"},

    // A command the run needed is not installed.
    {S::kToolNotFound, R::kLine, T::kKey,
     R"re(^(?:\S+: )?(?:line \d+: )?(?P<detail>[\w.+/\-]+): command not found$)re"},
    {S::kToolNotFound, R::kLine, T::kKey,
     R"re(^(?:\S+: )?\d+: (?P<detail>[\w.+/\-]+): not found$)re"},
    {S::kToolNotFound, R::kLine, T::kKey,
     R"re(^(?:make(?:\[\d+\])?|(?:/usr)?(?:/bin/)?env): '?(?P<detail>[\w.+/\-]+)'?: )re"
     R"re(No such file or directory$)re"},
    {S::kToolNotFound, R::kLine, T::kKey,
     R"re(exec: "(?P<detail>[^"]+)": executable file not found in \$PATH)re"},
    {S::kToolNotFound, R::kLine, T::kKey, R"re(spawn (?P<detail>\S+) ENOENT)re"},
    // The command wrapper's own message when exec fails (src/init).
    {S::kToolNotFound, R::kLine, T::kKey,
     R"re(^airlock[\w\-]*: cannot run (?P<detail>\S+): No such file or directory)re"},

    // The program ran out of memory on its own (the sandbox's limit is the classification's).
    {S::kOutOfMemory, R::kLine, T::kKey,
     R"re((?P<detail>JavaScript heap out of memory|java\.lang\.OutOfMemoryError|std::bad_alloc|)re"
     R"re(Cannot allocate memory|runtime: out of memory|memory allocation of \d+ bytes failed|)re"
     R"re([Oo]ut of memory))re"},
    {S::kOutOfMemory, R::kLine, T::kKey, R"re(^(?P<detail>MemoryError)\b)re"},

    // Compilation errors: gcc, clang, javac (and through Gradle), tsc, Kotlin, Go, Rust, ld.
    {S::kCompilationError, R::kLine, T::kKey,
     R"re(^(?:In file included from )?[^ :]+:\d+:(?:\d+:)? (?:fatal )?error: )re"},
    {S::kCompilationError, R::kLine, T::kKey,
     R"re(^\[ERROR\] (?P<file>\S+\.(?:java|kt|scala|groovy)):\[(?P<line>\d+),(?P<col>\d+)\] )re"
     R"re((?P<msg>.*)$)re"},
    {S::kCompilationError, R::kLine, T::kKey,
     R"re(^(?P<file>[^ :()]+)\((?P<line>\d+),(?P<col>\d+)\): (?P<msg>error TS\d+: .*)$)re"},
    {S::kCompilationError, R::kLine, T::kKey, R"re(^[^ :]+:\d+:\d+ - error TS\d+: )re"},
    {S::kCompilationError, R::kLine, T::kKey,
     R"re(^e: (?:file://)?(?P<file>\S+\.kts?):(?P<line>\d+):(?P<col>\d+):? (?P<msg>.*)$)re"},
    {S::kCompilationError, R::kLine, T::kKey,
     R"re(^e: (?P<file>\S+\.kts?): \((?P<line>\d+), (?P<col>\d+)\): (?P<msg>.*)$)re"},
    {S::kCompilationError, R::kLine, T::kKey, R"re(^(?:\./)?[\w./\-]+\.go:\d+:\d+: )re"},
    // rustc's "error[E0425]: " (a bare "error: " is anyone's: git, pip; rustc's own bare errors
    // are known by the " --> file:line:col" that follows) and cargo's summary.
    {S::kCompilationError, R::kLine, T::kKey, R"re(^error\[E\d+\]: |^error: could not compile )re"},
    {S::kCompilationError, R::kLine, T::kContext, R"re(^ *--> (?P<detail>[^ :]+:\d+):\d+$)re"},
    {S::kCompilationError, R::kLine, T::kKey,
     R"re(undefined reference to|Undefined symbols for architecture|ld: symbol\(s\) not found)re"},
    {S::kCompilationError, R::kLine, T::kContext,
     R"re(^collect2: error: ld returned|linker command failed|COMPILATION ERROR|)re"
     R"re(Compilation failed; see the compiler error output|^\d+ errors? generated\.$)re"},
    {S::kCompilationError, R::kException, T::kKey,
     R"re(^ {0,4}(?:SyntaxError|IndentationError|TabError): )re"},

    // Test failures: pytest, unittest, JUnit via Maven and Gradle, go test, jest, node --test
    // (TAP), GoogleTest, ctest, cargo test.
    {S::kTestFailure, R::kLine, T::kKey, R"re(^FAILED \((?:failures|errors)=)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^(?:FAILED|ERROR) (?P<detail>\S+::\S+))re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^(?:FAIL|ERROR): (?P<detail>\w+) \()re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^[^ :]+\.py:\d+: [\w.]+$)re"},
    {S::kTestFailure, R::kLine, T::kContext, R"re(^E {2,}\S)re"},
    {S::kTestFailure, R::kLine, T::kContext, R"re(^=+ .*\b[1-9]\d* (?:failed|errors?)\b.* =+$)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^--- FAIL: (?P<detail>\S+))re"},
    {S::kTestFailure, R::kLine, T::kContext, R"re(^FAIL\t\S+)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^ +\S+_test\.go:\d+: )re"},
    {S::kTestFailure, R::kLine, T::kKey,
     R"re(^\[ERROR\] {2,}(?P<detail>[\w.$]+\.\w+)(?::\d+)? .*$)re"},
    {S::kTestFailure, R::kLine, T::kContext,
     R"re(Tests run:.*(?:Failures: [1-9]|Errors: [1-9])|There are test failures|)re"
     R"re(There were failing tests|^\d+ tests? completed, \d+ failed)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^(?P<detail>\S.* > .+) FAILED$)re"},
    {S::kTestFailure, R::kLine, T::kKey,
     R"re(^ {4}(?P<msg>[\w.$]+(?:Error|Exception|Failure)\w*) at )re"
     R"re((?P<file>[\w$]+\.(?:java|kt|groovy|scala)):(?P<line>\d+)$)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^FAIL (?P<detail>\S+)$)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^ *● (?P<detail>.+)$)re"},
    {S::kTestFailure, R::kLine, T::kContext,
     R"re(^Tests: +[1-9]\d* failed|^ +(?:Expected|Received)(?: value)?: |^ +\d+ failing$)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^ *not ok \d+ - (?P<detail>.+)$)re"},
    {S::kTestFailure, R::kLine, T::kContext, R"re(^ *location: '[^']+:\d+:\d+'$|^# fail [1-9])re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^\[  FAILED  \] (?P<detail>[\w./]+))re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^\S+\.(?:cc|cpp|cxx|c|h|hpp):\d+: Failure$)re"},
    {S::kTestFailure, R::kLine, T::kKey,
     R"re(^ *\d+ - (?P<detail>\S+) \((?:Failed|SEGFAULT|Timeout))re"},
    {S::kTestFailure, R::kLine, T::kContext,
     R"re(The following tests FAILED:|tests passed, \d+ tests? failed out of|^test result: FAILED)re"},
    {S::kTestFailure, R::kLine, T::kKey, R"re(^test (?P<detail>\S+) \.\.\. FAILED$)re"},

    // Tracebacks and stack traces, so an error can be quoted with the place that raised it.
    {S::kNone, R::kTracebackStart, T::kSignal, R"re(^Traceback \(most recent call last\):$)re"},
    {S::kNone, R::kPythonFrame, T::kSignal, R"re(^ +File "(?P<file>[^"]+)", line (?P<line>\d+))re"},
    {S::kNone, R::kStackFrame, T::kSignal,
     R"re(^ +at (?:.+ \()?(?P<file>(?:/|\./|file://)[^():]+|[^():\s]+\.[cm]?[jt]sx?):)re"
     R"re((?P<line>\d+):(?P<col>\d+)\)?$)re"},
    {S::kNone, R::kStackFrame, T::kSignal,
     R"re(^[ \t]+at (?P<func>[\w.$<>/]+)\((?P<file>[\w$]+\.(?:java|kt|scala|groovy)):)re"
     R"re((?P<line>\d+)\)$)re"},
    {S::kNone, R::kStackFrame, T::kSignal,
     R"re(^\t(?P<file>/\S+\.go):(?P<line>\d+)(?: \+0x[0-9a-f]+)?$)re"},
    {S::kNone, R::kException, T::kKey, R"re(^Exception in thread "[^"]*" (?P<text>.+)$)re"},
    {S::kNone, R::kException, T::kContext, R"re(^Caused by: )re"},
    {S::kNone, R::kException, T::kKey, R"re(^(?:panic|fatal error): )re"},
    {S::kNone, R::kException, T::kKey,
     R"re(^(?:Uncaught )?[A-Za-z_][\w.$]*(?:Error|Exception|Exit|Interrupt|Failure)(?: \[\w+\])?)re"
     R"re((?:: .*)?$)re"},
    {S::kNone, R::kLine, T::kKey, R"re(^thread '[^']*' panicked at )re"},

    // Other error lines: quoted, no kind of their own.
    {S::kNone, R::kLine, T::kKey,
     R"re(^(?:error|Error|ERROR|fatal|FATAL|Fatal)(?:\[[\w\-]+\])?: )re"},
    {S::kNone, R::kLine, T::kContext,
     R"re(^\[ERROR\] |^npm (?:ERR!|error) |^make(?:\[\d+\])?: \*\*\* |^Execution failed for )re"
     R"re(task|^FAILURE: |^> (?:Could not|There were|Compilation failed))re"},
};

#undef AIRLOCK_HOST

}  // namespace

std::span<const LineRule> LineRules() { return kRules; }

}  // namespace airlock::command_internal
