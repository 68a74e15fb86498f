// GET /dashboard on the admin API: the operator's page (host/http/dashboard/index.html, embedded at
// build time), which reads engines, plugins, experiments and metrics from the admin API in the browser.
#pragma once

#include <string_view>

#include "http/http_listener.hpp"

namespace tokenhost {

// The page, as built into the binary.
std::string_view dashboard_page();

// Serves the page without a token: it holds no data, and its script sends the token (taken from the
// URL fragment or asked for) with each admin request it makes.
void add_dashboard_route(HttpListener& admin);

}  // namespace tokenhost
