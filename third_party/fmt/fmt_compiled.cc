// The compiled part of {fmt}, built from the Debian package's headers: Debian ships libfmt only
// as a shared object, and loading it (with the libstdc++ it pulls in) costs the `airlock` process
// a millisecond of dynamic linking per start. Every other translation unit uses fmt's ordinary
// (non header-only) declarations; this one provides their definitions, and the explicit
// instantiations that fmt/format.h declares `extern template`.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
