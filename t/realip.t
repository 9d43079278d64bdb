#!/usr/bin/perl
# Behind a proxy the limit is the client's, not the proxy's: with realip set
# at http, server or location level, key=$binary_remote_addr is the address
# from X-Forwarded-For.  And the module runs after limit_req: a request that
# limit_req rejects spends nothing of a ratelimit rule.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my %realip = (
    http     => [ "set_real_ip_from 127.0.0.1;\nreal_ip_header X-Forwarded-For;", '', '' ],
    server   => [ '', "set_real_ip_from 127.0.0.1;\nreal_ip_header X-Forwarded-For;", '' ],
    location => [ '', '', "set_real_ip_from 127.0.0.1;\nreal_ip_header X-Forwarded-For;" ],
);

for my $level (qw(http server location)) {
    my ($http, $server, $location) = @{ $realip{$level} };
    my $t = RLTest->new->start(<<"EOF");
$http
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    $server
    location / {
        $location
        ratelimit zone=z key=\$binary_remote_addr limit=2 period=1h;
    }
}
EOF
    is($t->statuses('/index.html', 3, { 'X-Forwarded-For' => '10.0.0.1' }), '200 200 429',
       "realip at $level level: the client 10.0.0.1 gets its 2");
    is($t->get('/index.html', { 'X-Forwarded-For' => '10.0.0.2' })->{status}, 200,
       "realip at $level level: another client behind the same proxy has its own budget");
    is($t->get('/index.html', { 'X-Forwarded-For' => '10.0.0.2' })->{headers}{'x-ratelimit-remaining'}, 0,
       "realip at $level level: and spends it");
    $t->stop();
}

# limit_req first: what it rejects (503) never reaches the ratelimit rule
{
    my $t = RLTest->new->start(<<'EOF');
limit_req_zone $binary_remote_addr zone=lr:1m rate=1r/m;
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location /both/ {
        limit_req zone=lr;
        ratelimit zone=z key=$binary_remote_addr limit=10 period=1h name=after;
        alias %%PREFIX%%/html/;
    }
    location /peek/ {
        ratelimit zone=z key=$binary_remote_addr limit=10 period=1h name=after cost=0;
        alias %%PREFIX%%/html/;
    }
    location = /stats {
        ratelimit_stats;
    }
}
EOF
    is($t->statuses('/both/index.html', 5), '200 503 503 503 503', 'limit_req admits one a minute');
    is($t->get('/peek/index.html')->{headers}{'x-ratelimit-remaining'}, 9,
       'the ratelimit rule spent only what limit_req let through');
    is($t->rule_stats('z', 'after')->{allowed}, 2, 'stats: the rule saw the admitted request (and the peek) only');
    $t->stop();
}

done_testing();
