#!/usr/bin/perl
# ratelimit_headers legacy | ietf | both | off with exact values, on static,
# proxied, error_page responses and the rejection itself; ratelimit_status.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLStructured;

my $t = RLTest->new();
$t->put_file('html/sorry.html', "slow down\n");

$t->start(<<'EOF'
log_format finalized '$status $ratelimit_status $ratelimit_remaining';
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;

    location /legacy/ {
        ratelimit zone=z limit=2 period=1m name=legacy;
        alias %%PREFIX%%/html/;
    }
    location /policies/ {
        ratelimit zone=z limit=3 period=1m burst=5 name=burst;
        ratelimit zone=z algorithm=sliding_window limit=1000 period=1h name=hourly;
        ratelimit zone=z algorithm=quota reset=daily limit=5000 name=daily;
        ratelimit zone=z algorithm=concurrency limit=4 name=at_once;
        ratelimit_headers ietf;
        alias %%PREFIX%%/html/;
    }
    location /policies_var/ {
        ratelimit zone=z limit=$http_x_plan limit_default=2 period=1m name=plan;
        ratelimit zone=z algorithm=fixed_window limit=100 period=1h name=hour_var;
        ratelimit_headers ietf;
        alias %%PREFIX%%/html/;
    }
    location /status/ {
        ratelimit zone=z limit=1 period=1m name=status;
        ratelimit_status 503;
        alias %%PREFIX%%/html/;
    }
    location /page/ {
        ratelimit zone=z limit=1 period=1m name=page;
        error_page 429 /sorry.html;
        alias %%PREFIX%%/html/;
    }
    location = /sorry.html { }
    location /proxy/ {
        ratelimit zone=z limit=2 period=1m name=proxy;
        proxy_pass http://127.0.0.1:%%PORT%%/backend/;
    }
    location /backend/ {
        alias %%PREFIX%%/html/;
    }
    location /finalized/ {
        ratelimit zone=z limit=2 period=1m name=finalized;
        access_log %%PREFIX%%/finalized.log finalized;
        alias %%PREFIX%%/html/;
    }
EOF
    # a location a choice of ratelimit_headers, each its own rule
    . RLTest::locations(map { ("/$_/" => "ratelimit zone=z limit=2 period=1m name=$_; ratelimit_headers $_;") }
                        qw(ietf both off))
    . "}\n");

# a response a filter finalizes the request with (not_modified's 412 to an
# If-Unmodified-Since in the past) carries the headers, and the variables
# know the request (the filter cleared every module's context)
{
    my $r = $t->get('/finalized/index.html', { 'If-Unmodified-Since' => 'Thu, 01 Jan 1970 00:00:01 GMT' });
    is($r->{status}, 412, 'a filter finalized the request: 412');
    is($r->{headers}{'x-ratelimit-remaining'}, 1, 'its response has the rate-limit headers');
    is($r->{headers}{'x-ratelimit-limit'}, 2, 'once');
}

sub h {
    my ($r, $name) = @_;
    return $r->{headers}{$name};
}

# legacy (the default)
{
    my @r = $t->gets('/legacy/index.html', 3);
    is_deeply([ map { $_->{status} } @r ], [ 200, 200, 429 ], 'legacy: statuses');
    is(h($r[0], 'x-ratelimit-limit'), 2, 'legacy: limit');
    is(h($r[0], 'x-ratelimit-remaining'), 1, 'legacy: remaining');
    is(h($r[0], 'x-ratelimit-reset'), 30, 'legacy: reset');
    is(h($r[2], 'retry-after'), 30, 'legacy: Retry-After on the rejection');
    is(h($r[0], 'ratelimit'), undef, 'legacy: no IETF headers');
    is(h($r[0], 'retry-after'), undef, 'legacy: no Retry-After when allowed');
}

# RateLimit-Policy lists every policy of the location, the same on every
# response (written once at configuration time), and RateLimit names the
# one closest to its limit
{
    my @r = map { $t->get('/policies/index.html') } 1 .. 3;
    my @f = map { eval { RLStructured::ratelimit_fields($_->{headers}) } || do { diag($@); {} } } @r;
    is(scalar(grep { $_->{policies} } @f), 3, 'policies: the three responses parse as Structured Fields');
    is_deeply([ map { h($_, 'ratelimit-policy') } @r ], [ (h($r[0], 'ratelimit-policy')) x 3 ],
              'policies: the same RateLimit-Policy on each response');
    is_deeply($f[0]{policies},
              [ { name => 'burst', q => 5, w => 100 }, { name => 'hourly', q => 1000, w => 3600 },
                { name => 'daily', q => 5000, w => 86400 }, { name => 'at_once', q => 4 } ],
              'policies: every rule, its quota and window (none for concurrency), in order');
    is($f[0]{limit}{name}, 'at_once', 'policies: RateLimit names the closest to its limit (3 of 4 slots left)');
    is($f[2]{limit}{name}, 'burst', '... until another is closer (2 of 5 left)');
    is($f[2]{policy}{name}, 'burst', '... and that one is in RateLimit-Policy');
    my @v = map { $t->get('/policies_var/index.html', { 'X-Plan' => $_ }) } 7, 9;
    is(h($v[0], 'ratelimit-policy'), '"plan";q=7;w=60, "hour_var";q=100;w=3600', 'a variable limit: its policy as it applied');
    is(h($v[1], 'ratelimit-policy'), '"plan";q=9;w=60, "hour_var";q=100;w=3600', '... to each request');
}

# ietf
{
    my @r = $t->gets('/ietf/index.html', 3);
    is(h($r[0], 'ratelimit-policy'), '"ietf";q=2;w=60', 'ietf: policy');
    is(h($r[0], 'ratelimit'), '"ietf";r=1;t=30', 'ietf: 1st');
    is(h($r[1], 'ratelimit'), '"ietf";r=0;t=30', 'ietf: 2nd: one unit back in 30 s');
    is(h($r[2], 'ratelimit'), '"ietf";r=0;t=30', 'ietf: rejected: t is its Retry-After');
    is(h($r[2], 'retry-after'), 30, 'ietf: Retry-After');
    for my $i (0 .. 2) {
        my $f = eval { RLStructured::ratelimit_fields($r[$i]{headers}) };
        ok($f && $f->{policy}{name} eq 'ietf' && $f->{limit}{name} eq 'ietf', "ietf: request $i parses as SF")
            or diag($@);
    }
    is(h($r[0], 'x-ratelimit-limit'), undef, 'ietf: no legacy headers');
}

# both
{
    my @r = $t->gets('/both/index.html', 3);
    is(h($r[1], 'x-ratelimit-remaining'), 0, 'both: legacy remaining');
    is(h($r[1], 'ratelimit'), '"both";r=0;t=30', 'both: ietf');
    is(h($r[2], 'retry-after'), 30, 'both: Retry-After');
}

# off: no headers at all, not even Retry-After
{
    my @r = $t->gets('/off/index.html', 3);
    is($r[2]{status}, 429, 'off: still rejected');
    is(join(',', grep { /ratelimit|retry-after/ } sort keys %{ $r[2]{headers} }), '', 'off: no headers');
}

# custom status
{
    my @r = $t->gets('/status/index.html', 2);
    is($r[1]{status}, 503, 'ratelimit_status 503');
    is(h($r[1], 'retry-after'), 60, '503 carries Retry-After');
}

# error_page: the page for 429 is served with the headers, counted once
{
    my @r = $t->gets('/page/index.html', 2);
    is($r[1]{status}, 429, 'error_page: status kept');
    is($r[1]{content}, "slow down\n", 'error_page: the custom page');
    is(h($r[1], 'retry-after'), 60, 'error_page: Retry-After');
    is(h($r[1], 'x-ratelimit-remaining'), 0, 'error_page: rate-limit headers');
}

# proxied responses carry the headers too
{
    my $r = $t->get('/proxy/index.html');
    is($r->{status}, 200, 'proxy: passed');
    is($r->{content}, "ok\n", 'proxy: backend content');
    is(h($r, 'x-ratelimit-remaining'), 1, 'proxy: headers on the proxied response');
}

like($t->access_log, qr/GET \/sorry\.html|GET \/page\/index\.html/, 'access log written');

$t->stop();
like($t->file('finalized.log'), qr/^412 PASSED 1$/m, 'the access log knows the request too');
done_testing();
