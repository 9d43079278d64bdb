#!/usr/bin/perl
# README's examples, followed as written: the whole nginx.conf at the top
# (load_module at the Debian package's path, its own backend), "Behind a
# reverse proxy" (realip, a key from a header or the address, the backend's
# rate-limit headers hidden) and "Coming from limit_req" (the limit_req
# configuration and its ratelimit equivalent admit the same requests).  The
# only changes made to them: the module's path (the one under test), ports
# (free ones), and the load balancers' network (the test's is 127.0.0.1).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my %blocks = RLTest::readme_blocks();
my $backend_port = RLTest::free_port();

# a backend that sends rate-limit headers of its own
my $backend = <<"EOF";
upstream backend {
    server 127.0.0.1:$backend_port;
}
server {
    listen 127.0.0.1:$backend_port;
    location / {
        add_header X-RateLimit-Limit 5000;
        add_header X-RateLimit-Remaining 4999;
        add_header RateLimit-Policy '"upstream";q=5000;w=3600';
        return 200 "backend\\n";
    }
}
EOF

# --- the version README names (the package's file, the stats) is VERSION's
{
    my $readme = RLTest::read_file("$FindBin::Bin/../README.md");
    chomp(my $version = RLTest::read_file("$FindBin::Bin/../VERSION"));
    my @named = $readme =~ /libnginx-mod-http-ratelimit_([^_\s]+)_amd64\.deb|"version":"([^"]+)"/g;
    @named = grep { defined } @named;
    ok(scalar @named, 'README names the version');
    is_deeply([ grep { $_ ne $version } @named ], [], "and every time it is $version, from VERSION");
}

# --- the example at the top: a whole nginx.conf
{
    my $conf = $blocks{top}[0] // BAIL_OUT('no nginx example at the top of README.md');
    like($conf, qr{^load_module /usr/lib/nginx/modules/ngx_http_ratelimit_module\.so;$}m,
         'top: load_module names where the Debian package installs the module');
    like($conf, qr/^\s*upstream backend \{/m, 'top: it defines the backend it proxies to');

    my $t = RLTest->new();
    my $p = $t->prefix;
    my $load = $t->load_line;
    my $user = $> == 0 ? 'user root;' : '';
    $conf =~ s{^load_module \S+;$}{$load\n$user\ndaemon off;\npid $p/nginx.pid;\nerror_log $p/error.log notice;}m;
    $conf =~ s/^(http \{)$/$1\n    access_log $p\/access.log;\n    client_body_temp_path $p\/tmp\/body;\n    proxy_temp_path $p\/tmp\/proxy;/m;
    $conf =~ s/listen 8080;/'listen 127.0.0.1:' . $t->port . ';'/e;
    $conf =~ s/127\.0\.0\.1:8081/127.0.0.1:$backend_port/g;
    RLTest::write_file("$p/nginx.conf", $conf);
    $t->start();

    my $r = $t->get('/api/users', { 'X-Api-Key' => 'k1' });
    is($r->{status}, 200, 'top: a request passes');
    is($r->{content}, "backend\n", 'top: proxied to the backend');
    is($r->{headers}{'x-ratelimit-limit'}, 100, 'top: the binding rule is the per-address one');
    is($r->{headers}{'x-ratelimit-remaining'}, 19, 'top: 20 at once, one spent');
    $r = $t->get('/api/users');
    is($r->{status}, 200, 'top: no API key: the key rule exempts it, the address rule applies');
    is($r->{headers}{'x-ratelimit-remaining'}, 18, 'top: the same address, two spent');
    $t->stop();
}

# --- behind a reverse proxy
{
    my $conf = $blocks{'Behind a reverse proxy'}[0] // BAIL_OUT('no "Behind a reverse proxy" example');
    like($conf, qr{^set_real_ip_from 10\.0\.0\.0/8;$}m, 'proxy: trusts the load balancers');
    $conf =~ s{10\.0\.0\.0/8}{127.0.0.1};
    $conf =~ s/listen 8080;/listen 127.0.0.1:%%PORT%%;/;

    my $t = RLTest->new();
    $t->write_conf($conf . $backend);
    $t->start();

    my $get = sub { $t->get('/api/users', { @_ }) };
    my $r = $get->('X-Forwarded-For' => '203.0.113.7');
    is($r->{status}, 200, 'proxy: a request passes');
    is($r->{headers}{'x-ratelimit-limit'}, '100', "proxy: one X-RateLimit-Limit, this module's");
    is($r->{headers}{'x-ratelimit-remaining'}, '99', "proxy: one X-RateLimit-Remaining, this module's");
    ok(!exists $r->{headers}{'ratelimit-policy'}, "proxy: the backend's RateLimit-Policy is hidden");
    is($get->('X-Forwarded-For' => '203.0.113.7')->{headers}{'x-ratelimit-remaining'}, 98,
       'proxy: the client behind the proxy is the key');
    is($get->('X-Forwarded-For' => '203.0.113.8')->{headers}{'x-ratelimit-remaining'}, 99,
       'proxy: another client has its own budget');
    is($get->('X-Forwarded-For' => '198.51.100.1, 203.0.113.7')->{headers}{'x-ratelimit-remaining'}, 97,
       'proxy: the rightmost untrusted address is the client');
    is($get->('X-Api-Key' => 'abc', 'X-Forwarded-For' => '203.0.113.7')->{headers}{'x-ratelimit-remaining'}, 99,
       'proxy: with an API key, the key has its own budget');
    is($get->('X-Api-Key' => 'abc', 'X-Forwarded-For' => '203.0.113.9')->{headers}{'x-ratelimit-remaining'}, 98,
       'proxy: from any address');
    $t->stop();
}

# --- coming from limit_req: the same login form, before and after
{
    my ($before, $after) = @{ $blocks{'Coming from limit_req'} // [] };
    BAIL_OUT('no before/after examples in "Coming from limit_req"') unless $after;
    like($before, qr/limit_req zone=login burst=5 nodelay;/, 'limit_req: the before');
    like($after, qr/ratelimit zone=login limit=6 period=1m burst=6;/, 'limit_req: the after');

    my %seen;
    for my $case ([ 'limit_req', $before ], [ 'ratelimit', $after ]) {
        my ($name, $conf) = @$case;
        $conf =~ s/listen 8080;/listen 127.0.0.1:%%PORT%%;/;
        my $t = RLTest->new();
        $t->write_conf($conf . $backend);
        $t->start();
        # seven attempts in a row (the next is allowed 10 s after the first)
        my @status = map { $t->get('/login')->{status} } 1 .. 7;
        is("@status", '200 200 200 200 200 200 429', "$name: six attempts pass, the seventh is rejected");
        $seen{$name} = "@status";
        $t->stop();
    }
    is($seen{ratelimit}, $seen{limit_req}, 'limit_req and its ratelimit equivalent decide alike');
}

done_testing();
