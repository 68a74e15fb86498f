#include "http/dashboard_route.hpp"

#include "http/http_message.hpp"

namespace tokenhost {

#include "http/dashboard_page.inc"  // kDashboardPage: host/http/dashboard/index.html, generated at build time

std::string_view dashboard_page() { return kDashboardPage; }

void add_dashboard_route(HttpListener& admin) {
  admin.route("GET", "/dashboard", [](const HttpRequest&, HttpResponse& res) {
    // The page's script handles the admin token: it may run only its own inline code, talk only to this
    // origin, and is never framed by another site.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                   "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(kDashboardPage), "text/html; charset=utf-8");
  });
}

}  // namespace tokenhost
