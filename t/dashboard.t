#!/usr/bin/perl
# ratelimit_dashboard, tested as a person would: nginx with two zones and
# three rules, traffic until keys are refused, and the page opened in
# Debian's headless Chromium.  Its DOM after its first polls
# (--dump-dom) names every zone and rule and shows the refusals and the top
# key; an error banner, not a blank page, when the stats location fails;
# the reset button only where writes are allowed.  Then, in real time
# (DevTools over a pipe): the page under load draws its charts and does not
# jump, a click on Reset asks first and sends the DELETE (and says so when the
# API refuses it), it fits 375 px, and a stats location going down
# mid-session brings the banner up over the last figures.  Also nginx -t of
# every bad use of the directive.  Security: the page's
# Content-Security-Policy has no 'unsafe-inline' (its script and style sheet
# are allowed by the SHA-256 of the page's own, and nothing the page does
# breaks the policy: no violation in any session), and zones, rules and keys
# named __proto__, constructor, toString, hasOwnProperty, or holding markup,
# quotes or </script>, are shown as the text they are.  The key API is the real ratelimit_api:
# with writes (/rl/), read-only (/ro/), and saying it allows writes while
# nginx's access control refuses them (/dn/, limit_except).  Overrides, in
# an nginx of their own: those made through the API listed with their rule,
# key or range, action, limits and time left, a page at a time (a hostile
# key as text, running nothing); on a writable API the form adds one (the
# API then holds what was entered), an entry the API refuses shows its
# message as it is, and Remove removes; read-only, neither form nor Remove.
# Adaptive rules, behind a real slow upstream: a chart of the limit over the
# latency for them alone, its latest limit the stats' at that moment.
#
# RL_DASHBOARD_SHOT=docs/dashboard.png keeps the screenshot under load there,
# after RL_DASHBOARD_LOAD seconds of load (default 60; without a shot the load
# stops once the checks under load are done).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use JSON::PP;
use HTTP::Tiny;
use Digest::SHA qw(sha256_base64);
use POSIX ();
use Time::HiRes qw(sleep time);
use RLTest;
use RLBrowser;

my $t = RLTest->new();
my $p = $t->prefix;

# ---- nginx -t ----

my @bad = (
    [ 'no parameter', 'ratelimit_dashboard;',
      qr/"ratelimit_dashboard" directive: missing "stats=": expected stats=URI, the location of ratelimit_stats/ ],
    [ 'api only', 'ratelimit_dashboard api=/rl/;', qr/missing "stats="/ ],
    [ 'empty stats', 'ratelimit_dashboard stats=;',
      qr/"ratelimit_dashboard" directive: invalid "stats=": expected a path on this server, starting with "\/"/ ],
    [ 'relative stats', 'ratelimit_dashboard stats=stats;', qr/invalid "stats=stats": expected a path/ ],
    [ 'another host', 'ratelimit_dashboard stats=//evil.example/stats;',
      qr/invalid "stats=\/\/evil.example\/stats": a path may not start with "\/\/"/ ],
    [ 'full URL', 'ratelimit_dashboard stats=http://h/stats;', qr/invalid "stats=http:\/\/h\/stats"/ ],
    [ 'a quote', q{ratelimit_dashboard "stats=/st\"ats";},
      qr/invalid "stats=\/st"ats": expected letters, digits, .* and %XX escapes/ ],
    [ 'markup', 'ratelimit_dashboard stats=/stats api=/</script>;', qr/invalid "api=\/<\/script>"/ ],
    [ 'a query', 'ratelimit_dashboard stats=/stats?format=json;', qr/invalid "stats=\/stats\?format=json".*no query/ ],
    [ 'a space', 'ratelimit_dashboard stats=/stats "api=/r l/";', qr/invalid "api=\/r l\/"/ ],
    [ 'a bad escape', 'ratelimit_dashboard stats=/st%zz;', qr/invalid "stats=\/st%zz"/ ],
    [ 'empty api', 'ratelimit_dashboard stats=/stats api=;', qr/invalid "api=": expected a path/ ],
    [ 'unknown parameter', 'ratelimit_dashboard stats=/stats colour=red;',
      qr/"ratelimit_dashboard" directive: unknown parameter "colour=red": expected stats=URI or api=URI/ ],
    [ 'duplicate parameter', 'ratelimit_dashboard stats=/a stats=/b;',
      qr/duplicate parameter "stats=\/b": each parameter may be given once/ ],
    [ 'twice', "ratelimit_dashboard stats=/a;\n ratelimit_dashboard stats=/b;",
      qr/"ratelimit_dashboard" directive is duplicate/ ],
);
for my $case (@bad) {
    my ($what, $text, $re) = @$case;
    $t->conf_refused(RLTest::one_location($text, '= /d'), $re, $what);
}
{
    my ($rc, $out) = $t->test_conf("server { listen 127.0.0.1:%%PORT%%; ratelimit_dashboard stats=/s; }");
    like($out, qr/"ratelimit_dashboard" directive is not allowed here/, 'nginx -t: a location directive');
    ($rc, $out) = $t->test_conf("server { listen 127.0.0.1:%%PORT%%; location = /d { ratelimit_dashboard stats=/ratelimit/stats "
                                . "api=/rl/api-v1.0/~x/%2F/; } location = /e { ratelimit_dashboard stats=/s; } }");
    is($rc, 0, 'nginx -t passes the URIs it can write into the page') or diag($out);
}

# ---- the page in Chromium ----

ok(RLBrowser::chromium(), 'chromium is installed (./build.sh test installs Debian\'s package)')
    or do { done_testing(); exit };

sub conf {
    my ($stats_down) = @_;
    my $stats = $stats_down ? 'return 500;' : 'ratelimit_stats;';
    return <<"EOF";
keepalive_requests 100000;
ratelimit_zone api 1m;
ratelimit_zone web 64k;
server {
    listen 127.0.0.1:%%PORT%%;
    add_header X-Fingerprint \$ratelimit_fingerprint always;

    location /api/ {
        ratelimit zone=api key=\$http_x_ip limit=10 period=1s name=per_ip;
        ratelimit zone=api key=\$http_x_user algorithm=fixed_window align=first limit=100 period=1h
                  name=per_user log_key=on;
        alias %%PREFIX%%/html/;
    }
    location /web/ {
        ratelimit zone=web key=\$http_x_ip algorithm=leaky_bucket limit=50 period=1s max_delay=100ms
                  name=pages;
        alias %%PREFIX%%/html/;
    }

    location = /stats { $stats allow 127.0.0.1; deny all; }
    location = /stats-500 { return 500; }
    location = /stats-down { return 444; }

    location = /dashboard { ratelimit_dashboard stats=/stats api=/rl/; allow 127.0.0.1; deny all; }
    location = /dashboard-ro { ratelimit_dashboard stats=/stats api=/ro; }
    location = /dashboard-noapi { ratelimit_dashboard stats=/stats; }
    location = /dashboard-404 { ratelimit_dashboard stats=/stats api=/nothing/; }
    location = /dashboard-500 { ratelimit_dashboard stats=/stats-500 api=/rl/; }
    location = /dashboard-down { ratelimit_dashboard stats=/stats-down api=/rl/; }

    # fields to come (a version) and fields missing: a canned stats answer
    location = /dashboard-canned { ratelimit_dashboard stats=/canned/stats.json; }

    # behind auth_basic: the page's requests carry the browser's credentials
    location /private/ {
        auth_basic "rate limits";
        auth_basic_user_file %%PREFIX%%/htpasswd;
        location = /private/ { ratelimit_dashboard stats=/private/stats; }
        location = /private/stats { ratelimit_stats; }
    }

    # the key API: with writes, read-only, and with writes that nginx's
    # access control refuses (the API says it allows them)
    location = /dashboard-denied { ratelimit_dashboard stats=/stats api=/dn/; }
    location /rl/ { ratelimit_api write=on; allow 127.0.0.1; deny all; }
    location /ro/ { ratelimit_api; }
    location /dn/ {
        ratelimit_api write=on;
        limit_except GET { deny all; }
    }
}
EOF
}
$t->start(conf());

# The page itself.
{
    my $r = $t->get('/dashboard');
    is($r->{status}, 200, 'page: 200');
    is($r->{headers}{'content-type'}, 'text/html; charset=utf-8', 'page: HTML');
    my $csp = $r->{headers}{'content-security-policy'} // '';
    like($csp, qr/default-src 'none';.*connect-src 'self'/,
         'page: the browser loads nothing else, and reads only this server');
    unlike($csp, qr/unsafe-inline|unsafe-eval|unsafe-hashes/, "page: no 'unsafe-inline' in its policy: $csp");
    my @scripts = $r->{content} =~ m{<script>(.*?)</script>}sg;
    my @styles = $r->{content} =~ m{<style>(.*?)</style>}sg;
    is(scalar @scripts, 1, 'page: one script');
    is(scalar @styles, 1, 'page: one style sheet');
    like($csp, qr/(?:^|; )script-src 'sha256-\Q${\ sha256_base64($scripts[0] \/\/ '')}\E='(?:;|$)/,
         'page: its script allowed by its SHA-256, and nothing else');
    like($csp, qr/(?:^|; )style-src 'sha256-\Q${\ sha256_base64($styles[0] \/\/ '')}\E='(?:;|$)/,
         'page: its style sheet allowed by its SHA-256, and nothing else');
    (my $markup = $r->{content}) =~ s{<script>.*?</script>|<style>.*?</style>|<!--.*?-->}{}sg;
    unlike($markup, qr/<[^>]*\s(?:style|on[a-z]+)=/i, 'page: no style or event attribute, which the policy would block');
    is($r->{headers}{'cache-control'}, 'no-cache', 'page: Cache-Control: no-cache (it holds no state)');
    is($r->{headers}{'x-content-type-options'}, 'nosniff', 'page: X-Content-Type-Options: nosniff');
    like($r->{content}, qr{<script id="rl-config" type="application/json">\{"stats":"/stats","api":"/rl/"\}</script>},
         'page: its URIs written in');
    unlike($r->{content}, qr{(?:src|href)="?(?:https?:)?//}, 'page: no external resource');
    like($t->get('/dashboard-noapi')->{content}, qr{\{"stats":"/stats","api":null\}}, 'page: no api=');
    $r = $t->request('HEAD', '/dashboard');
    is($r->{status}, 200, 'page: HEAD');
    is($r->{headers}{'content-length'}, length $t->get('/dashboard')->{content}, 'page: HEAD, its length');
    is($t->request('POST', '/dashboard', {}, 'x')->{status}, 405,
       'page: POST not allowed');
}

# Keys refused in every rule, by requests one after another.
my $fp_alice;
for my $i (1 .. 120) {    # per_user: alice's 100 an hour, then 20 refused
    my $r = $t->get_as('/api/index.html', ip => "10.1.0.$i", user => 'alice');
    $fp_alice = $r->{headers}{'x-fingerprint'} if $r->{status} == 429;
}
like($fp_alice // '', qr/^[0-9a-f]{16}$/, "alice's fingerprint in zone api: $fp_alice");
for (1 .. 40) {
    $t->get_as('/api/index.html', ip => '10.0.0.7');
}
# a key refused more than a thousand times: its count shown for people
my %sent = $t->pipelined('/api/index.html', 'X-Ip', ('10.0.0.8') x 1500);
cmp_ok($sent{429} // 0, '>', 1000, "10.0.0.8 refused more than 1,000 times ($sent{429})");
my $fp_ip = $t->get_as('/api/index.html', ip => '10.0.0.8')->{headers}{'x-fingerprint'};
my $stats = $t->stats;
my $rules = $stats->{zones}{api}{rules};
is($rules->{per_user}{rejected}, 20, 'per_user refused 20 of alice\'s requests');

# What the key API says of them, for the page to show.
my $top = $t->get_json('/rl/zones/api/top');
my ($top_ip) = @{ $top->{rules}{per_ip}{keys} };
is($top_ip->{fingerprint}, $fp_ip, 'the key API: 10.0.0.8 on top of per_ip');
is_deeply([ map { [ $_->{key}, $_->{refused} ] } @{ $top->{rules}{per_user}{keys} } ], [ [ 'alice', 20 ] ],
          'the key API: alice, 20 times, by name (per_user logs keys in clear)');
mkdir "$p/html/canned";
# names no configuration can give: markup, quotes, </script>, and
# the names of Object.prototype's members
my @canned_names = ('odd <b>&amp;</b>', '</script><script>window.pwned=1</script>',
                    q{"quote' <img src=x onerror="window.pwned=1">}, '__proto__', 'constructor', 'toString',
                    'hasOwnProperty');
$t->put_file('html/canned/stats.json', JSON::PP->new->canonical->encode({
    version => '9.8.7',
    zones => { bare => { rules => { r1 => {},
                                    # a concurrency rule, and a rule with charge=
                                    slots => { allowed => 5, in_flight => 2, peak => 3, waited => 4 },
                                    tokens => { allowed => 3, charged => 1600, debts => 1 },
                                    # a ratelimit_bandwidth rule
                                    bw => { bytes => 9 * 1048576, bytes_per_second => 1572864,
                                            connections => 5, delayed_now => 4 } } },
               # a zone of stream {}
               tcp => { block => 'stream', keys => 1, rules => { ssh => { rejected => 2 } } },
               map { ($_ => { keys => 3, rules => { map { ($_ => { rejected => 7 }) } @canned_names } }) }
               @canned_names } }));
$t->put_file('htpasswd', "ops:{PLAIN}secret\n");

# like and unlike, but a DOM is too long to show when it fails
sub has {
    my ($text, $re, $name) = @_;
    ok($text =~ $re, $name) or diag("no $re in the DOM (" . length($text) . ' characters)');
}
sub hasnt {
    my ($text, $re, $name) = @_;
    ok($text !~ $re, $name) or diag("$re in the DOM: $&");
}

# one element's HTML from the DOM: the rule's <article>, the zone's <section>
sub part {
    my ($dom, $tag, $attr, $name) = @_;
    return $dom =~ m{(<$tag class="[^"]*" $attr="\Q$name\E">.*?</$tag>)}s ? $1 : '';
}
sub data_value {
    my ($html, $class) = @_;
    return $html =~ m{class="$class"[^>]*data-value="([^"]*)"|data-value="([^"]*)"[^>]*class="$class"}s
        ? $1 // $2 : undef;
}

my $url = 'http://127.0.0.1:' . $t->port;
my $t0 = time;
my $dom = RLBrowser::dump_dom("$url/dashboard");
my $polls = $dom =~ /<body data-polls="(\d+)"/ ? $1 : 0;
cmp_ok($polls, '>=', 2, "the page polled ($polls polls in the DOM's 5 virtual seconds)");
has($dom, qr/<p id="banner" role="alert" hidden="">/, 'no error banner');
for my $z (qw(api web)) {
    has($dom, qr/<section class="zone" data-zone="$z">/, "zone $z shown");
}
for my $r (qw(per_ip per_user pages)) {
    has($dom, qr/<article class="rule" data-rule="$r">/, "rule $r shown");
}
my $user = part($dom, 'article', 'data-rule', 'per_user');
is(data_value($user, 'total-refused'), 20, 'per_user: 20 refused, as nginx counted');
has($user, qr/>20<\/b> refused/, 'per_user: the figure on the page');
is(data_value($user, 'total-allowed'), 100, 'per_user: 100 allowed');
has($user, qr/fixed_window · 100 \/ 1h/, 'per_user: its algorithm and limit from the API');
has($user, qr/<td class="key" data-key="alice"[^>]*>alice<\/td><td class="n" data-value="20"[^>]*>20<\/td>/,
     'per_user: the top key, alice, with its count');
has($user, qr/<button class="reset"/, 'per_user: a reset button (writes allowed)');
my $ip = part($dom, 'article', 'data-rule', 'per_ip');
is(data_value($ip, 'total-refused'), $rules->{per_ip}{rejected}, 'per_ip: its refusals, as nginx counted');
has($ip, qr/data-key="$fp_ip"[^>]*>$fp_ip</, 'per_ip: a key by its fingerprint');
my $big = $top_ip->{refused};
has($ip, qr/data-value="$big"[^>]*>\Q${\ fmt($big)}\E</, "per_ip: its count for people (${\ fmt($big)})");
has($ip, qr/gcra · 10 \/ 1s/, 'per_ip: its algorithm and limit');
has(part($dom, 'article', 'data-rule', 'pages'), qr/leaky_bucket · 50 \/ 1s/, 'pages: a period in ms, shown');
my $api = part($dom, 'section', 'data-zone', 'api');
has($api, qr/keys held \/ capacity<\/span><b data-value="$stats->{zones}{api}{keys}"/, 'zone api: keys held');
has($api, qr/summary refusals<\/dt><dd><span data-value="\d+"/, 'zone api: its summary refusals');
has($api, qr/live-key evictions<\/dt><dd><span data-value="\d+"/, 'zone api: its live-key evictions');

sub fmt {   # as the page's fmtNum, for the figures used here
    my ($n) = @_;
    return $n < 1000 ? $n : $n < 9995 ? sprintf('%.1fk', $n / 1000) : sprintf('%.0fk', $n / 1000);
}

$dom = RLBrowser::dump_dom("$url/dashboard-ro");
$user = part($dom, 'article', 'data-rule', 'per_user');
has($user, qr/data-key="alice"/, 'read-only API: the top key shown');
hasnt($dom, qr/<button/, 'read-only API: no reset button');

$dom = RLBrowser::dump_dom("$url/dashboard-noapi");
has($dom, qr/data-rule="per_user"/, 'no api=: the stats shown');
has($dom, qr/<p id="apinote">Top refused keys and overrides need ratelimit_api: give ratelimit_dashboard an api= parameter/,
     'no api=: says the top keys and overrides need ratelimit_api');
has($dom, qr/<table class="top" hidden="">/, 'no api=: no top keys table');
has($dom, qr/<div class="overrides" hidden="">/, 'no api=: no overrides panel');

$dom = RLBrowser::dump_dom("$url/dashboard-404");
has($dom, qr/data-rule="per_user"/, 'API answering 404: the stats shown');
has($dom, qr/<p id="apinote">Top refused keys and overrides need ratelimit_api: \/nothing\/zones answered 404/,
     'API answering 404: says so');

$dom = RLBrowser::dump_dom("$url/dashboard-canned");
has($dom, qr/<span id="version">v9\.8\.7<\/span>/, 'canned stats: a version shown');
has($dom, qr/<article class="rule" data-rule="r1">/, 'canned stats: a rule without figures shown');
has($dom, qr/class="total-in_flight"[^>]*data-value="2"|data-value="2"[^>]*class="total-in_flight"/, 'canned stats: slots in flight shown');
has($dom, qr/class="total-peak"[^>]*data-value="3"|data-value="3"[^>]*class="total-peak"/, 'canned stats: the most at once');
has($dom, qr/class="total-waited"[^>]*data-value="4"|data-value="4"[^>]*class="total-waited"/, 'canned stats: requests that waited');
has($dom, qr/class="total-charged"[^>]*data-value="1600"|data-value="1600"[^>]*class="total-charged"/, 'canned stats: units charged');
has($dom, qr/class="total-debts"[^>]*data-value="1"|data-value="1"[^>]*class="total-debts"/, 'canned stats: requests left in debt');
{
    my $bw = part($dom, 'article', 'data-rule', 'bw');
    has($bw, qr/<b class="bw-rate" data-value="1572864"[^>]*>1\.5 MiB\/s<\/b> sent a second/,
        'canned stats: a bandwidth rule\'s bytes a second');
    has($bw, qr/<b class="bw-connections" data-value="5"/, 'canned stats: its responses sending');
    has($bw, qr/<b class="bw-delayed" data-value="4"[^>]*>4<\/b> waiting for their slice/,
        'canned stats: its delayed connections');
    has($bw, qr/<table class="top" hidden="">/, 'canned stats: no top refused keys for a bandwidth rule');
    my $slots = part($dom, 'article', 'data-rule', 'slots');
    has($slots, qr/<div class="bandwidth" hidden="">/, 'canned stats: no bandwidth figures for another rule');
}
has($dom, qr/<span class="zname">odd &lt;b&gt;&amp;amp;&lt;\/b&gt;<\/span>/, 'canned stats: a name is text, not markup');
has($dom, qr/<span id="status">live/, 'canned stats: no page error');
has($dom, qr/<span class="zname">tcp<\/span>(?:<span class="tag"[^>]*><\/span>)?<span class="tag block">stream<\/span>/,
    'canned stats: a stream zone labelled "stream"');
hasnt($dom, qr/<span class="zname">bare<\/span>(?:<span[^>]*>[^<]*<\/span>)*<span class="tag block">stream/,
      'canned stats: a zone without "block" has no label');
for my $name (@canned_names) {
    my $text = html_text($name);
    my @zones = $dom =~ /<span class="zname">\Q$text\E<\/span>/g;
    is(scalar @zones, 1, "canned stats: zone \"$name\" shown once, as text");
    my @rules = $dom =~ /<span class="name">\Q$text\E<\/span>/g;
    is(scalar @rules, scalar @canned_names, "canned stats: rule \"$name\" shown in each zone, as text");
}
hasnt($dom, qr/<img|<script>window/, 'canned stats: no markup from a name in the page');

# as the DOM's serialization escapes text
sub html_text {
    my ($s) = @_;
    $s =~ s/&/&amp;/g;
    $s =~ s/</&lt;/g;
    $s =~ s/>/&gt;/g;
    return $s;
}

# Zones and rules of a real nginx named as Object.prototype's members, and
# refused keys holding markup, quotes and </script> (rules with log_key=on
# show them in clear): each shown, with its own figures, as text.
my @proto = qw(__proto__ constructor toString hasOwnProperty);
my %limit = (__proto__ => 2, constructor => 3, toString => 4, hasOwnProperty => 5, valueOf => 6);
# (keys of up to 32 bytes: the top keys keep that much of a key)
my @evil = ('</script><script>pwned=1//', q{"q'<img src=x onerror=pwned=1>}, '<b>bold</b>&amp;');
# (2m: room for two rules' top keys in clear in a zone)
my $names = RLTest->new->start(join('', map { "ratelimit_zone $_ 2m;\n" } @proto) . <<"EOF");
server {
    listen 127.0.0.1:%%PORT%%;
@{[ map { my ($z, $r) = ($proto[$_ % 4], (sort keys %limit)[$_]); "    location /$r/ {\n"
          . "        ratelimit zone=$z key=\$http_x_k limit=$limit{$r} period=1h name=$r log_key=on;\n"
          . "        alias %%PREFIX%%/html/;\n    }\n" } 0 .. 4 ]}
    location = /stats { ratelimit_stats; }
    location /api/ { ratelimit_api write=on; }
    location = /dashboard { ratelimit_dashboard stats=/stats api=/api/; }
}
EOF
my %refused;
for my $rule (sort keys %limit) {
    for my $k (@evil) {   # each key refused twice
        $refused{$rule} += $names->get("/$rule/index.html", { 'X-K' => $k })->{status} == 429
            for 1 .. $limit{$rule} + 2;
    }
}
my $nurl = 'http://127.0.0.1:' . $names->port;
$dom = RLBrowser::dump_dom("$nurl/dashboard");
has($dom, qr/<span id="status">live/, 'names: no page error');
has($dom, qr/<p id="banner" role="alert" hidden="">/, 'names: no error banner');
for my $i (0 .. 4) {
    my ($z, $r) = ($proto[$i % 4], (sort keys %limit)[$i]);
    has($dom, qr/<section class="zone" data-zone="$z"><h2><span class="zname">$z<\/span>/, "names: zone $z shown");
    has(part($dom, 'section', 'data-zone', $z), qr/<article class="rule" data-rule="$r">/,
        "names: zone $z shows its rule $r");
}
for my $rule (sort keys %limit) {
    my $html = part($dom, 'article', 'data-rule', $rule);
    has($html, qr/<span class="name">$rule<\/span>/, "names: rule $rule shown");
    is(data_value($html, 'total-refused'), $refused{$rule}, "names: rule $rule, $refused{$rule} refused, as nginx counted");
    has($html, qr/gcra · $limit{$rule} \/ 1h/, "names: rule $rule, its limit from the key API");
    for my $k (@evil) {
        my $shown = html_text($k =~ s/"/\\x22/gr);   # the API escapes a quote as log lines do
        has($html, qr/<td class="key" data-key="[^"]*" title="key, [^"]*">\Q$shown\E<\/td><td class="n" data-value="2"/,
            "names: rule $rule, the key $k shown as text, refused twice");
    }
}
hasnt($dom, qr/<img|<b>bold|<script>window/, 'names: no markup from a key or a name in the page');

# The same in real time: the page's policy never violated, nothing injected
# ran, and the policy does block what it should (an inline script added to
# the page does not run).
my $watch = q{window.cspViolations = [];
    document.addEventListener('securitypolicyviolation', function (e) {
        window.cspViolations.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || ''));
    });};
{
    my $nb = RLBrowser->new(width => 1280, height => 800);
    $nb->on_new_document($watch);
    $nb->open_page("$nurl/dashboard");
    ok($nb->wait_for(q{document.querySelectorAll('article.rule td.key[data-key]').length >= 15}, 20),
       'names, in real time: every rule\'s top keys shown');
    is($nb->js('JSON.stringify(window.cspViolations)'), '[]', 'names, in real time: no policy violation');
    is($nb->js('typeof window.pwned'), 'undefined', 'names, in real time: nothing injected ran');
    is($nb->js('document.querySelectorAll("img").length'), 0, 'names, in real time: no image element');
    is($nb->js(q{(function () { var s = document.createElement('script'); s.textContent = 'window.pwned = 2';
                    document.body.appendChild(s); return typeof window.pwned; })()}),
       'undefined', 'names, in real time: an inline script added to the page does not run');
    like($nb->wait_for('window.cspViolations.length && window.cspViolations[0]', 5), qr/^script-src/,
         'names, in real time: and the browser reports it as a violation of script-src');
    $nb->quit;
}
$names->stop();

is($t->get('/private/')->{status}, 401, 'auth_basic: the page needs a password');
$dom = RLBrowser::dump_dom('http://ops:secret@127.0.0.1:' . $t->port . '/private/');
has($dom, qr/<p id="banner" role="alert" hidden="">.*data-rule="per_user"/s, 'auth_basic: the page reads the stats');
like($t->access_log, qr{ ops \[[^]]*\] "GET /private/stats HTTP}, 'auth_basic: as the user logged in');

for my $case ([ '500', qr/HTTP 500/ ], [ 'down', qr/unreachable/ ]) {
    my ($which, $why) = @$case;
    $dom = RLBrowser::dump_dom("$url/dashboard-$which");
    has($dom, qr/<p id="banner" role="alert">Cannot read the figures at \/stats-$which: [^<]*?$why/,
         "stats location $which: the error banner");
    has($dom, qr/<h1>ratelimit dashboard<\/h1>.*No figures: the stats location could not be read/s,
         "stats location $which: the page is not blank");
    has($dom, qr/<span id="status">stats unavailable/, "stats location $which: the status says so");
}

my $narrow = "$p/narrow.png";
my $size = RLBrowser::screenshot_url("$url/dashboard", $narrow, 375, 812) // 0;
cmp_ok($size, '>', 20000, "a 375 px wide screenshot with something in it ($size bytes)");
is(png_width($narrow), 375, 'and 375 px wide');
diag(sprintf('%.1f s for 10 runs of chromium', time - $t0));

sub png_width {
    open(my $fh, '<:raw', $_[0]) or return 0;
    read($fh, my $head, 24);
    return substr($head, 0, 8) eq "\x89PNG\r\n\x1a\n" ? unpack('N', substr($head, 16, 4)) : 0;
}

# ---- in real time, under load ----

# Clients sending until they are stopped, for at most 120 s and 200,000
# requests each: a heavy key in per_ip and pages, light keys around them
# (per_user's users too many to be refused: alice stays its top key).
sub load {
    my $deadline = time + 120;
    my @who = (
        [ '/api/index.html', sub { (ip => '10.0.0.7') }, 0.002 ],
        [ '/api/index.html', sub { (ip => '10.2.0.' . int(rand 200), user => 'u' . int(rand 1e6)) }, 0.01 ],
        [ '/web/index.html', sub { (ip => '10.0.0.9') }, 0.002 ],
        [ '/web/index.html', sub { (ip => '10.0.0.9') }, 0.002 ],
        [ '/web/index.html', sub { (ip => '10.3.0.' . int(rand 50)) }, 0.01 ],
    );
    return map {
        my $w = $_;
        RLTest::spawn(sub {
            my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 10);
            for (1 .. 200_000) {
                last if time > $deadline;
                my %h = $w->[1]->();
                $http->get("$url$w->[0]", { headers => { map { ("X-\u$_" => $h{$_}) } keys %h } });
                sleep $w->[2] if $w->[2];
            }
            return;
        });
    } @who;
}

my $shot = $ENV{RL_DASHBOARD_SHOT};
my $seconds = $ENV{RL_DASHBOARD_LOAD} // 60;
$t0 = time;
my $b = RLBrowser->new(width => 1280, height => 800);
$b->on_new_document($watch);
$b->open_page("$url/dashboard");
my $load_start = time;
my @load = load();
END { $_->stop for @load }   # a test that died under load
ok($b->wait_for(q{+document.querySelector('[data-rule="per_ip"] .rate-refused').dataset.value > 0}, 30),
   'under load: per_ip refuses every second');
ok($b->wait_for(q{+document.querySelector('[data-rule="pages"] .rate-delayed').dataset.value > 0}, 30),
   'under load: pages delays every second');
my $layout = q{JSON.stringify([].map.call(document.querySelectorAll('header, .zone, .rule, canvas, table.top'),
    function (e) { var r = e.getBoundingClientRect(); return [r.top, r.left, r.width, r.height]; }))};
my $before = $b->js($layout);
my $n = $b->js('+document.body.dataset.polls');
$b->wait_for("+document.body.dataset.polls >= $n + 2", 30);
is($b->js($layout), $before, 'under load: nothing moves from one poll to the next');
# the refused line drawn in per_ip's chart: pixels of its colour
my $red = $b->js(q{(function () {
    var c = document.querySelector('[data-rule="per_ip"] canvas'), g = c.getContext('2d');
    var want = getComputedStyle(document.documentElement).getPropertyValue('--refused').trim();
    var w = [1, 3, 5].map(function (i) { return parseInt(want.substr(i, 2), 16); });
    var d = g.getImageData(0, 0, c.width, c.height).data, n = 0;
    for (var i = 0; i < d.length; i += 4)
        if (d[i + 3] > 200 && Math.abs(d[i] - w[0]) + Math.abs(d[i + 1] - w[1]) + Math.abs(d[i + 2] - w[2]) < 60) n++;
    return n; })()});
cmp_ok($red, '>', 5, "under load: per_ip's chart draws its refusals ($red pixels)");
if ($shot) {
    sleep 0.2 while time < $load_start + $seconds;
    my $s = $b->screenshot($shot);
    diag("screenshot under load: $shot ($s bytes)");
}
cmp_ok($b->screenshot("$p/laptop.png"), '>', 50000, 'a laptop screenshot with something in it');
$_->stop for @load;
@load = ();

# Reset: the dialog first; no means no.
my $button = q{document.querySelector('[data-rule="per_user"] td[data-key="alice"] ~ td button.reset')};
$b->dialogs(0);
is($b->js("(function (b) { b.click(); return b.disabled; })($button)"), JSON::PP::false,
   'reset: dismissed, nothing done');
$b->dialogs(1);
$b->js("$button.click()");
like($b->wait_for(q{document.querySelector('[data-rule="per_user"] .topnote').textContent}, 10),
     qr/^Key alice reset at/, 'reset: accepted, done, and said');
my @asked = $b->dialogs;
is(scalar @asked, 2, 'reset: asked each time');
like($asked[0] // '', qr/^Reset key alice in zone "api"\?\n\nIts state in rule per_user is forgotten/,
     'reset: the question names the key, zone and rule');
my @deletes = grep { /"DELETE / } split /\n/, $t->access_log;
is(scalar @deletes, 1, 'reset: one DELETE');
like($deletes[0] // '', qr{"DELETE /rl/zones/api/keys\?fingerprint=$fp_alice&rule=per_user HTTP/1\.1" 200 },
     'reset: of alice, by fingerprint and rule, done');
is($t->get_as('/api/index.html', ip => '10.4.0.1', user => 'alice')->{status}, 200, 'reset: alice admitted again');
like($t->error_log, qr/ratelimit: key fingerprint $fp_alice reset in rule "per_user" of zone "api" by the key API \(it was held\), client 127\.0\.0\.1/,
     'reset: logged');

# An API saying it allows writes while nginx's access control refuses them
# (limit_except): the page says so, and the buttons go.
for (1 .. 101) {   # alice refused again
    $t->get_as('/api/index.html', ip => "10.5.0.$_", user => 'alice');
}
$b->open_page("$url/dashboard-denied");
$b->wait_for($button, 10);
ok($b->wait_for(q{!!document.querySelector('[data-zone="api"] form.ovradd')}, 10),
   'writes refused by nginx: the page offers the overrides form at first');
$b->js("$button.click()");
like($b->wait_for(q{document.querySelector('[data-rule="per_user"] .topnote').textContent}, 10),
     qr/^Not reset: the key API refused the write \(HTTP 403\)\.$/,
     'reset refused (403): said');
is($b->js('document.querySelectorAll("button.reset").length'), 0, 'reset refused (403): no more buttons');
is($b->js('document.querySelectorAll("form.ovradd").length'), 0, 'reset refused (403): nor overrides forms');

# A phone.
$b->viewport(375, 812);
cmp_ok($b->wait_for('document.documentElement.scrollWidth <= 375 && document.documentElement.scrollWidth', 5),
       '==', 375, '375 px: nothing wider than the screen');

# The stats location going down while the page watches.
$t->reload(conf(1));
like($b->wait_for(q{!document.getElementById('banner').hidden && document.getElementById('banner').textContent}, 30),
     qr/^Cannot read the figures at \/stats: HTTP 500.*The figures below are from \d\d:\d\d:\d\d/,
     'stats down mid-session: the banner, over the last figures');
ok($b->js(q{!!document.querySelector('[data-rule="per_user"]')}), 'stats down mid-session: the figures stay');
$t->reload(conf(0));
ok($b->wait_for(q{document.getElementById('banner').hidden}, 30), 'stats back: the banner goes');
is($b->js('JSON.stringify(window.cspViolations)'), '[]',
   'the whole session (under load, reset, 403, 375 px, stats down): no policy violation');
$b->quit;
diag(sprintf('%.1f s in real time', time - $t0));

$t->stop();

# ---- overrides: listed, added and removed ----

# A zone's overrides as the page lists them, a page at a time: those made
# through the key API shown with their rule, key or range, action, limits
# and time left (a hostile key as text); on a writable API the form writes
# what was entered (checked through the API), shows the API's message as it
# is when it refuses, and Remove removes (asked first); read-only: no form,
# no Remove; writes refused by nginx's access control: said, and the form
# goes.
my $o = RLTest->new->start(<<"EOF");
ratelimit_zone ov 1m overrides=100;
ratelimit_zone noroom 64k overrides=0;
server {
    listen 127.0.0.1:%%PORT%%;
    location /u/ { ratelimit zone=ov key=\$http_x_user limit=100 period=1h name=by_user; alias %%PREFIX%%/html/; }
    location /a/ { ratelimit zone=ov key=\$binary_remote_addr limit=100 period=1m name=by_addr; alias %%PREFIX%%/html/; }
    location /n/ { ratelimit zone=noroom key=\$http_x_user limit=5 period=1m name=plain; alias %%PREFIX%%/html/; }
    location = /stats { ratelimit_stats; }
    location /rl/ { ratelimit_api write=on; }
    location /ro/ { ratelimit_api; }
    location /dn/ {
        ratelimit_api write=on;
        limit_except GET { deny all; }
    }
    location = /dashboard { ratelimit_dashboard stats=/stats api=/rl/; }
    location = /dashboard-ro { ratelimit_dashboard stats=/stats api=/ro/; }
    location = /dashboard-dn { ratelimit_dashboard stats=/stats api=/dn/; }
}
EOF
my $ourl = 'http://127.0.0.1:' . $o->port;
my $json = JSON::PP->new->canonical;
sub pct { (my $s = $_[0]) =~ s/([^A-Za-z0-9._~-])/sprintf('%%%02X', ord $1)/ge; return $s }
my $ov_put = sub { $o->request('PUT', "/rl/zones/ov/overrides?$_[0]", {}, $_[1]) };
my $ov_get = sub { $o->get("/rl/zones/ov/overrides?$_[0]") };

my $evil = '<img src=x onerror=window.pwned=1>';
my $evil_q = pct($evil);
(my $evil_api = $evil) =~ s/ /%20/g;   # as the API writes it: bytes that need it %-encoded
my @made = (
    [ 'key=alice&rule=by_user', '{"limit":500,"burst":50,"period":"1m","expire":"7d"}' ],
    [ 'range=10.1.0.0/16&rule=by_addr', '{"action":"deny","expire":"1h"}' ],
    [ "key=$evil_q&keyed=%24http_x_user", '{"action":"allow"}' ],
    [ 'key=%0A%01%09%09&rule=by_addr', '{"limit":7}' ],   # an address's 4 bytes: no text
);
for my $m (@made) {
    my $r = $ov_put->(@$m);
    is($r->{status}, 200, "overrides: PUT ?$m->[0] $m->[1]") or diag($r->{content});
}

$dom = RLBrowser::dump_dom("$ourl/dashboard");
my $ovz = part($dom, 'section', 'data-zone', 'ov');
has($ovz, qr/<div class="overrides"><h3><span class="name">Overrides<\/span><span class="count">4 held, room for 100<\/span>/,
    'overrides: the zone\'s panel, with how many it holds');
has($ovz, qr/<td class="o-target"[^>]*>\Q&lt;img src=x onerror=window.pwned=1&gt;\E<\/td>/,
    'overrides: a hostile key shown as text');
has($ovz, qr/<form class="ovradd"/, 'overrides: a form to add one (writes allowed)');
hasnt($dom, qr/<img/, 'overrides: no markup from a key in the page');
has(part($dom, 'section', 'data-zone', 'noroom'),
    qr/<span class="count">no room for overrides \(ratelimit_zone overrides=0\)<\/span>/,
    'overrides: a zone without room for them says so');
hasnt(part($dom, 'section', 'data-zone', 'noroom'), qr/<form/, 'overrides: and offers no form');

# the rows of a zone's list: each cell's text, and the row's target, by target
sub ov_rows {
    my ($b, $zone) = @_;
    my $rows = $b->js(qq{JSON.stringify([].map.call(
        document.querySelectorAll('[data-zone="$zone"] table.ovr tbody tr[data-target]'), function (tr) {
            return [].map.call(tr.cells, function (c) { return c.textContent; }).concat([tr.dataset.target]); }))});
    return { map { ($_->[8] => $_) } @{ JSON::PP->new->decode($rows // '[]') } };
}

my $ob = RLBrowser->new(width => 1280, height => 900);
$ob->on_new_document($watch);
$ob->open_page("$ourl/dashboard");
ok($ob->wait_for(q{document.querySelectorAll('[data-zone="ov"] table.ovr tr[data-target]').length === 4}, 20),
   'overrides, in real time: the four listed');
my $rows = ov_rows($ob, 'ov');
my $alice = $rows->{alice} // [];
is_deeply([ @$alice[0 .. 5, 7] ], [ 'by_user', 'alice', 'limit', '500', '50', '1m', 'Remove' ],
          'overrides: alice in by_user, limit 500, burst 50 a minute, with a Remove button');
like($alice->[6] // '', qr/^(?:6 d 23 h|7 d)$/, "overrides: alice's expires in 7 days ($alice->[6])");
is_deeply([ @{ $rows->{'10.1.0.0/16'} // [] }[0 .. 5, 7] ], [ 'by_addr', '10.1.0.0/16', 'deny', '', '', '', 'Remove' ],
          'overrides: a range denied in by_addr');
my $left = $ob->js(q{+document.querySelector('[data-zone="ov"] tr[data-target="10.1.0.0/16"] .o-expires').dataset.value});
ok($left > 3_500_000 && $left <= 3_600_000, "overrides: its time left, from the API ($left ms)");
is_deeply($rows->{$evil_api}, [ 'every rule on $http_x_user', $evil, 'allow', '', '', '', 'never', 'Remove', $evil_api ],
          'overrides: the hostile key, allowed in every rule keyed on $http_x_user, shown as the text it is, no expiry');
is_deeply($rows->{'%0A%01%09%09'},
          [ 'by_addr', '%0A%01%09%09', 'limit', '7', "\x{2013}", "\x{2013}", 'never', 'Remove', '%0A%01%09%09' ],
          'overrides: a key of no text shown as the API writes it, what it does not set as the rule\'s');
is($ob->js('typeof window.pwned'), 'undefined', 'overrides: nothing in a key ran');
is($ob->js('document.querySelectorAll("img").length'), 0, 'overrides: no image element');
# a key that a right-to-left override would show as another: as the API writes it
is($ov_put->('key=invoice%E2%80%AEfdp.exe&rule=by_user', '{"action":"deny"}')->{status}, 200, 'overrides: PUT a key with U+202E');
my $rlo = q{document.querySelector('[data-zone="ov"] tr[data-target="invoice%E2%80%AEfdp.exe"] .o-target')};
is($ob->wait_for("$rlo && $rlo.textContent", 20), 'invoice%E2%80%AEfdp.exe',
   'overrides: a key with a bidirectional override shown %-encoded');
is($o->request('DELETE', '/rl/zones/ov/overrides?key=invoice%E2%80%AEfdp.exe&rule=by_user')->{status}, 200,
   'overrides: and removed through the API');
ok($ob->wait_for("!$rlo", 20), 'overrides: and gone from the list');

# The form: fields set as a person would, then Add; returns what was set.
sub ov_add {
    my ($b, %v) = @_;
    return $b->js(sprintf(q{(function (v) {
        var f = document.querySelector('[data-zone="ov"] form.ovradd');
        ['rule', 'kind', 'action', 'target', 'limit', 'burst', 'period', 'expire'].forEach(function (k) {
            f.elements[k].value = k in v ? v[k] : '';
            f.elements[k].dispatchEvent(new Event('change'));
        });
        var got = [].map.call(f.elements, function (e) { return e.name ? e.name + '=' + e.value : ''; }).join(' ');
        f.querySelector('button.add').click();
        return got; })(%s)}, $json->encode(\%v)));
}
my $note = q{document.querySelector('[data-zone="ov"] .ovrnote').textContent};
is(ov_add($ob, rule => 'by_user', kind => 'key', target => 'bob smith', action => 'limit', limit => '42',
            period => '30s', expire => '2h'),
     'rule=by_user kind=key target=bob smith action=limit limit=42 burst= period=30s expire=2h ',
     'form: the fields entered');
like($ob->wait_for("$note.indexOf('written') > 0 && $note", 20),
     qr/^Override of key bob smith in rule by_user written at \d\d:\d\d:\d\d\.$/, 'form: written, and said');
my $ov = RLTest::json_of($ov_get->('key=bob%20smith&rule=by_user'))->{override} // {};
is_deeply([ @$ov{qw(rule key action limit period_ms)}, exists $ov->{burst} ? 'burst' : 'no burst' ],
          [ 'by_user', 'bob%20smith', 'limit', 42, 30000, 'no burst' ],
          'form: the API holds it as entered (rule, key, action, limit, period; no burst)');
ok(($ov->{expires_in_ms} // 0) > 7_100_000 && $ov->{expires_in_ms} <= 7_200_000,
   'form: expiring in 2 h (' . ($ov->{expires_in_ms} // 'none') . ' ms)');
ok($ob->wait_for(q{!!document.querySelector('[data-zone="ov"] tr[data-target="bob%20smith"]')}, 20),
   'form: and it is listed');

ov_add($ob, rule => 'by_addr', kind => 'range', target => '192.168.0.0/24', action => 'deny');
like($ob->wait_for("/192/.test($note) && $note", 20), qr/^Override of range 192\.168\.0\.0\/24 in rule by_addr written/,
     'form: a range denied, said');
$ov = RLTest::json_of($ov_get->('range=192.168.0.0%2F24&rule=by_addr'))->{override} // {};
is_deeply([ @$ov{qw(rule range action)}, exists $ov->{expires_in_ms} ? $ov->{expires_in_ms} : 'absent' ],
          [ 'by_addr', '192.168.0.0/24', 'deny', undef ], 'form: the API holds the range, denied, without expiry');

# an invalid entry: the API's own message, as it is
my $refusal = RLTest::json_of($ov_put->('key=carol&rule=by_user', '{"action":"limit","limit":0,"expire":null}'))->{error};
like($refusal // '', qr/"limit": expected an integer/, "the API refuses limit 0: $refusal");
ov_add($ob, rule => 'by_user', kind => 'key', target => 'carol', action => 'limit', limit => '0');
my $msg = q{document.querySelector('[data-zone="ov"] .ovrnote .msg')};
is($ob->wait_for("$msg && $msg.textContent", 20), $refusal, 'form: limit 0, the API\'s message shown as it is');
like($ob->js($note), qr/^Not added \(HTTP 400\): /, 'form: saying it was not added');
is($ov_get->('key=carol&rule=by_user')->{status}, 404, 'form: nothing written');
my $every = RLTest::json_of($ov_put->('key=dave&keyed=%24http_x_user', '{"action":"limit","limit":5,"expire":null}'))->{error};
like($every // '', qr/names its rule/, "the API refuses a limit for every rule: $every");
is(RLTest::json_of($ov_put->('key=dave', '{"action":"deny","expire":null}'))->{error} // '',
   RLTest::json_of($ov_put->('key=dave', '{"action":"deny","expire":null}'))->{error} // 'none',
   'a key of every rule in a zone keyed on two expressions: refused without keyed=');
is($ob->js(q{[].map.call(document.querySelector('[data-zone="ov"] form.ovradd').elements.rule.options,
                         function (o) { return o.textContent; }).join()}),
   'every rule on $http_x_user,every rule on $binary_remote_addr,by_user,by_addr',
   'form: every rule of each key expression, then each rule, as configured');
ov_add($ob, rule => "\x00\$http_x_user", kind => 'key', target => 'dave', action => 'limit', limit => '5');
is($ob->wait_for("$msg && $msg.textContent !== " . $json->encode($refusal) . " && $msg.textContent", 20), $every,
   'form: a limit for every rule, the API\'s message');

# Remove: asked first; no means no.
sub ov_remove {
    my ($b, $target) = @_;
    return $b->js(sprintf(q{(function (t) {
        var b = [].filter.call(document.querySelectorAll('[data-zone="ov"] tr[data-target]'),
                               function (tr) { return tr.dataset.target === t; })[0].querySelector('button.remove');
        b.click();
        return b.disabled; })(%s)}, $json->encode($target)));
}
$ob->dialogs(0);
is(ov_remove($ob, 'bob%20smith'), JSON::PP::false, 'remove: dismissed, nothing done');
is($ov_get->('key=bob%20smith&rule=by_user')->{status}, 200, 'remove: dismissed, the override is still there');
$ob->dialogs(1);
for my $case ([ 'bob%20smith', 'key=bob%20smith&rule=by_user', 'key bob smith in rule by_user' ],
              [ $evil_api, "key=$evil_q&keyed=%24http_x_user", "key $evil in every rule keyed on \$http_x_user" ],
              [ '%0A%01%09%09', 'key=%0A%01%09%09&rule=by_addr', 'key %0A%01%09%09 in rule by_addr' ],
              [ '192.168.0.0/24', 'range=192.168.0.0%2F24&rule=by_addr', 'range 192.168.0.0/24 in rule by_addr' ]) {
    my ($target, $q, $what) = @$case;
    ov_remove($ob, $target);
    like($ob->wait_for("$note.indexOf(" . $json->encode("$what removed") . ") > 0 && $note", 20),
         qr/^Override of \Q$what\E removed at \d\d:\d\d:\d\d\.$/, "remove: $what, said");
    is($ov_get->($q)->{status}, 404, "remove: $what, gone from the API");
    ok($ob->wait_for(sprintf(q{![].some.call(document.querySelectorAll('[data-zone="ov"] tr[data-target]'),
                                function (tr) { return tr.dataset.target === %s; })}, $json->encode($target)), 20),
       "remove: $what, gone from the list");
}
my @asked_ov = $ob->dialogs;
is(scalar @asked_ov, 5, 'remove: asked each time');
like($asked_ov[0] // '',
     qr/^Remove the override of key bob smith in rule by_user in zone "ov"\?\n\nIts requests meet rule by_user as configured again\.$/,
     'remove: the question names the key, rule and zone');

# More than a page: the pages walked hold each override once.
for my $i (1 .. 23) {
    my $s = $ov_put->(sprintf('key=page-%02d&rule=by_user', $i), '{"limit":9}')->{status};
    $s == 200 or fail("PUT page-$i: $s");
}
my $all = RLTest::json_of($o->get('/rl/zones/ov/overrides?count=1000'));
is($all->{total}, 25, 'pages: 25 overrides in the zone');
my $pages = q{document.querySelector('[data-zone="ov"] .pager .pages').textContent};
my $pager = sub { "document.querySelector('[data-zone=\"ov\"] .pager button:$_[0]-child')" };
my %seen;
for my $p ([ 1, 10 ], [ 11, 20 ], [ 21, 25 ]) {
    my $want = "$p->[0]\x{2013}$p->[1] of 25";
    is($ob->wait_for("$pages === '$want' && $pages", 20), $want, "pages: $p->[0] to $p->[1] of 25");
    ok($ob->js($pager->('first') . '.disabled'), 'pages: no page before the first') if $p->[0] == 1;
    my $r = ov_rows($ob, 'ov');
    is(scalar keys %$r, $p->[1] - $p->[0] + 1, "pages: $p->[0] to $p->[1], as many rows");
    $seen{$_}++ for keys %$r;
    $ob->js($pager->('last') . '.click()') if $p->[1] < 25;
}
ok($ob->js($pager->('last') . '.disabled'), 'pages: no page after the last');
is_deeply(\%seen, { map { (($_->{key} // $_->{range}) => 1) } @{ $all->{overrides} } },
          'pages: every override of the zone, each on one page');
# six removed elsewhere while the last page is shown: the last there is
my @gone = (grep { /^page-/ } sort keys %seen)[0 .. 5];
is($o->request('DELETE', "/rl/zones/ov/overrides?key=$_&rule=by_user")->{status}, 200, "$_ removed through the API")
    for @gone;
is($ob->wait_for("$pages === '11\x{2013}19 of 19' && $pages", 20), "11\x{2013}19 of 19",
   'pages: six removed elsewhere, the last page there is (11 to 19 of 19)');

is($ob->js('JSON.stringify(window.cspViolations)'), '[]', 'overrides: no policy violation (listing, adding, removing, pages)');
is($ob->js('typeof window.pwned'), 'undefined', 'overrides: nothing injected ran');

# Read-only: listed, nothing to add or remove.
$ob->open_page("$ourl/dashboard-ro");
is($ob->wait_for("$pages === '1\x{2013}10 of 19' && $pages", 20), "1\x{2013}10 of 19", 'read-only: the overrides listed');
is(scalar keys %{ ov_rows($ob, 'ov') }, 10, 'read-only: a page of them');
is($ob->js('document.querySelectorAll("form.ovradd").length'), 0, 'read-only: no form');
is($ob->js('document.querySelectorAll("button.remove").length'), 0, 'read-only: no Remove button');
is($ob->js('document.querySelectorAll("[data-zone=\"ov\"] td.act")[0].textContent'), '', 'read-only: the row\'s last cell empty');

# Writes the API allows and nginx's access control refuses: said, and gone.
$ob->open_page("$ourl/dashboard-dn");
ok($ob->wait_for(q{!!document.querySelector('[data-zone="ov"] form.ovradd')}, 20), 'writes refused by nginx: a form first');
ov_add($ob, rule => 'by_user', kind => 'key', target => 'erin', action => 'deny');
like($ob->wait_for("$note.indexOf('Not added') === 0 && $note", 20),
     qr/^Not added: the key API refused the write \(HTTP 403\)\.$/, 'writes refused by nginx (403): said');
is($ob->js('document.querySelectorAll("form.ovradd, button.remove").length'), 0,
   'writes refused by nginx (403): no more form nor Remove buttons');
is($ov_get->('key=erin&rule=by_user')->{status}, 404, 'writes refused by nginx (403): nothing written');
is($ob->js('JSON.stringify(window.cspViolations)'), '[]', 'overrides: no policy violation, read-only and refused');
$ob->quit;
$o->stop();

# ---- adaptive rules: the limit charted over the latency ----

# An adaptive rule in front of a real slow upstream (t/lib/rl_adaptive.py,
# as t/adaptive.t), beside a rule of another algorithm and a concurrency
# rule: only the adaptive rule has the chart.  After load that moves its
# limit, with the traffic stopped (no interval decides any more: the figures
# hold still), the chart's latest limit is the one the stats JSON reports,
# and is drawn where the chart's own scale puts it; the text beside it shows
# the same three figures.  Nothing here depends on how fast the machine is:
# the values compared are those nginx reports at that moment, whatever they
# are.
SKIP: {
    my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : '';
    skip 'python3 is missing (t/lib/rl_adaptive.py)', 1 unless $python;
    my $helper = "$FindBin::Bin/lib/rl_adaptive.py";
    my ($W, $MEAN) = (4, 50);    # capacity W / MEAN = 80 requests a second
    my $capacity = 1000 * $W / $MEAN;
    my $ad = RLTest->new;
    my $portfile = $ad->prefix . '/upstream.port';
    my $up = fork() // die "fork: $!";
    if ($up == 0) {
        exec($python, $helper, 'upstream', $portfile, '--workers', $W, '--mean-ms', $MEAN, '--sigma', 0.3)
            or POSIX::_exit(127);
    }
    RLTest::wait_until(sub { -s $portfile }, 10) or BAIL_OUT('the upstream did not start');
    chomp(my $upport = RLTest::read_file($portfile));
    $ad->start(<<"EOF2", workers => 2);
ratelimit_zone ad 1m;
upstream backend {
    server 127.0.0.1:$upport;
}
server {
    listen 127.0.0.1:%%PORT%%;
    proxy_read_timeout 2s;
    location / {
        ratelimit zone=ad key=backend_a algorithm=adaptive limit=32 interval=200ms name=ad;
        proxy_pass http://backend;
    }
    location /plain/ { ratelimit zone=ad key=\$remote_addr limit=1000 period=1s name=plain; alias %%PREFIX%%/html/; }
    location /slots/ { ratelimit zone=ad key=\$remote_addr algorithm=concurrency limit=10 name=slots; alias %%PREFIX%%/html/; }
    location = /stats { ratelimit_stats; }
    location /rl/ { ratelimit_api; }
    location = /dashboard { ratelimit_dashboard stats=/stats api=/rl/; }
    location = /dashboard-noapi { ratelimit_dashboard stats=/stats; }
}
EOF2
    my $aurl = 'http://127.0.0.1:' . $ad->port;
    $ad->get("/$_/index.html") for qw(plain slots);
    my $chart = sub { qq{document.querySelector('[data-rule="$_[0]"] svg.adaptchart')} };
    my $ab = RLBrowser->new(width => 1280, height => 900);
    $ab->on_new_document($watch);
    $ab->open_page("$aurl/dashboard");
    ok($ab->wait_for('!!' . $chart->('ad'), 20), 'adaptive: its rule has the chart (the key API names its algorithm)');
    ok($ab->wait_for(q{!!document.querySelector('[data-rule="slots"] .totals')}, 20), 'adaptive: the other rules shown');
    is($ab->js(q{[].map.call(document.querySelectorAll('svg.adaptchart'),
                 function (s) { return s.closest('article').dataset.rule; }).join()}), 'ad',
       'adaptive: no chart for a rule of another algorithm, nor for a concurrency rule');
    is($ab->js(q{document.querySelector('[data-rule="ad"] .adapt-limit').textContent}), "\x{2013}",
       'adaptive: before its first decision, no limit shown');

    # half the capacity, then four times it: the limit comes down
    my @secs = `$python $helper load $aurl/ --steps @{[ $capacity / 2 ]}:2,@{[ 4 * $capacity ]}:6 --timeout 2`;
    is(scalar @secs, 8, 'adaptive: 8 seconds of load sent');

    # the figures held still: the stats read before and after the page's
    # reading agree, and the page has polled after the first of them
    my ($s, $page);
    for (1 .. 10) {
        my $before = $ad->rule_stats('ad', 'ad');
        my $n = $ab->js('+document.body.dataset.polls');
        $ab->wait_for("+document.body.dataset.polls >= $n + 2", 20);
        $page = JSON::PP->new->decode($ab->js(q{(function () {
            var a = document.querySelector('[data-rule="ad"]'), l = a.querySelector('svg.adaptchart path.limit');
            var pts = (l.getAttribute('d').match(/-?[\d.]+,-?[\d.]+/g) || []).map(function (p) { return p.split(',').map(Number); });
            return JSON.stringify({ last: l.dataset.last, top: +l.dataset.top, y0: +l.dataset.y0, y1: +l.dataset.y1,
                points: +l.dataset.points, pts: pts, width: a.querySelector('svg.adaptchart').getBoundingClientRect().width,
                text: a.querySelector('.adapt-limit').textContent,
                limit: a.querySelector('.adapt-limit').dataset.value, recent: a.querySelector('.adapt-recent').dataset.value,
                baseline: a.querySelector('.adapt-baseline').dataset.value }); })()}));
        $s = $ad->rule_stats('ad', 'ad');
        last if join(',', @$before{qw(limit_now recent_us baseline_us)}) eq join(',', @$s{qw(limit_now recent_us baseline_us)});
    }
    cmp_ok($s->{limit_now}, '>', 0, "adaptive: the rule decided (limit_now $s->{limit_now}, recent $s->{recent_us} us, "
           . "baseline $s->{baseline_us} us)");
    is($page->{last}, $s->{limit_now}, "adaptive: the chart's latest limit is the stats' ($s->{limit_now})");
    my ($x, $y) = @{ $page->{pts}[-1] // [] };
    my $want = $page->{y0} - ($page->{top} ? $s->{limit_now} / $page->{top} : 0) * ($page->{y0} - $page->{y1});
    ok(defined $y && abs($y - $want) < 0.06 && $page->{top} >= $s->{limit_now},
       "adaptive: and drawn there on the chart's scale (y $y, for $want; top of the scale $page->{top})");
    ok(defined $x && abs($x - $page->{width}) < 1, "adaptive: at the chart's right edge, now (x $x of $page->{width})");
    cmp_ok($page->{points}, '>=', 3, "adaptive: a line of several polls ($page->{points} points)");
    is(scalar @{ $page->{pts} }, $page->{points}, 'adaptive: every point plotted');
    is_deeply([ @$page{qw(limit recent baseline)} ], [ @$s{qw(limit_now recent_us baseline_us)} ],
              'adaptive: the figures as text: limit, recent and baseline latencies, as the stats say');
    is($page->{text}, $s->{limit_now} < 1000 ? $s->{limit_now} : fmt($s->{limit_now}), 'adaptive: the limit, as text');
    is($ab->js('JSON.stringify(window.cspViolations)'), '[]', 'adaptive: the chart breaks no policy');
    $ab->quit;

    # no key API: the figures only adaptive rules have tell it
    my $adom = RLBrowser::dump_dom("$aurl/dashboard-noapi");
    has(part($adom, 'article', 'data-rule', 'ad'), qr/<svg class="adaptchart"/, 'adaptive, no key API: the chart');
    hasnt($adom, qr/data-rule="(?:plain|slots)">(?:(?!<\/article>).)*adaptchart/s,
          'adaptive, no key API: none for the other rules');
    $ad->stop;
    kill 'TERM', $up;
    waitpid($up, 0);
}

done_testing();
