#!/usr/bin/perl
# Rules limit the client's request, in the location that receives it: a
# subrequest passes its location's rules uncounted.  A concurrency rule of
# limit 1 in an auth_request location neither holds a slot for the main
# request's whole download nor turns the others into auth_request's 500s;
# the same rule where the request arrives refuses the second with 429.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLSlowUpstream;

my $nginx = $ENV{RL_NGINX} // '/usr/sbin/nginx';
plan(skip_all => "$nginx has no auth_request module (--with-http_auth_request_module)")
    unless `$nginx -V 2>&1` =~ /--with-http_auth_request_module/;

my $up = RLSlowUpstream->new->start;
my $upport = $up->port;

my $t = RLTest->new();
$t->put_file('html/ok', "ok\n");
$t->start(<<"EOF", workers => 2);
ratelimit_zone z 1m;

server {
    listen 127.0.0.1:%%PORT%%;

    # the rule where only the subrequest goes
    location /gated {
        auth_request /auth;
        proxy_pass http://127.0.0.1:$upport/hold/1500;
    }
    location = /auth {
        internal;
        ratelimit zone=z key=one algorithm=concurrency limit=1 name=in_auth;
        alias %%PREFIX%%/html/ok;
    }

    # the rule where the request arrives
    location /limited {
        ratelimit zone=z key=one algorithm=concurrency limit=1 name=at_entry;
        auth_request /open;
        proxy_pass http://127.0.0.1:$upport/hold/1500;
    }
    location = /open { internal; alias %%PREFIX%%/html/ok; }
    location = /stats { ratelimit_stats; }
}
EOF

my @r = $t->at_once(map { ['/gated'] } 1 .. 3);
is(RLTest::statuses_of(@r), '200 200 200', 'a rule in the auth_request location limits nothing: all three served');
my $s = $t->rule_stats('z', 'in_auth');
is(($s->{allowed} // 0) + ($s->{rejected} // 0), 0, 'its subrequests were not counted');

@r = sort { $a->{status} <=> $b->{status} } $t->at_once(map { ['/limited'] } 1 .. 2);
is(RLTest::statuses_of(@r), '200 429', 'the same rule where the request arrives: the second refused with 429');
RLTest::wait_until(sub { $t->rule_stats('z', 'at_entry')->{in_flight} == 0 }, 10);
is($t->rule_stats('z', 'at_entry')->{in_flight}, 0, 'its slot given back when the request ended');

$t->stop;
done_testing();
