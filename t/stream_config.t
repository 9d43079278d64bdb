#!/usr/bin/perl
# The stream module's configuration: what nginx -t refuses, naming the
# directive, the parameter and what is allowed; and how the two .so files
# load (the stream one after nginx's ngx_stream_module.so; the HTTP one
# alone in an nginx without the stream module).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;
use RLStream;

my $t = RLTest->new;
my $http = 'server { listen 127.0.0.1:%%PORT%%; location / { return 204; } }';

sub stream_refused {
    my ($stream, $re, $what, $http_body) = @_;
    my ($rc, $out) = $t->test_conf($http_body // $http, main => RLStream::main($t, $stream));
    isnt($rc, 0, "nginx -t fails: $what");
    like($out, $re, "nginx -t names it: $what");
}

my $server = 'server { listen 127.0.0.1:1; proxy_pass 127.0.0.1:2; %s }';

{
    # stream {} after http {}: the http zone is declared when the stream
    # block is checked
    my $text = $t->conf_text("ratelimit_zone web 1m; $http", main => RLStream::load_lines($t))
             . "stream {\n" . sprintf($server, 'ratelimit zone=web limit=5;') . "\n}\n";
    my ($rc, $out) = $t->nginx_t($text);
    isnt($rc, 0, 'nginx -t fails: a stream rule naming an http zone');
    like($out, qr/"ratelimit" directive: zone "web" is declared in the http block \(.*\): a rule of the stream block names a zone of the stream block/,
         'nginx -t names it: a stream rule naming an http zone');
}
stream_refused(sprintf($server, 'ratelimit zone=web limit=5;'),
               qr/zone=web is not declared: expected a "ratelimit_zone web SIZE;" in the stream block/,
               'a stream rule naming a zone the http block declares after it',
               "ratelimit_zone web 1m; $http");
stream_refused(sprintf($server, 'ratelimit zone=nowhere limit=5;'),
               qr/zone=nowhere is not declared: expected a "ratelimit_zone nowhere SIZE;" in the stream block/,
               'a zone declared nowhere');
stream_refused("ratelimit_zone web 1m; " . sprintf($server, ''),
               qr/"ratelimit_zone" directive: zone "web" is already declared/,
               'one namespace of zone names across blocks',
               "ratelimit_zone web 1m; $http");
stream_refused("ratelimit_zone s 1m; " . sprintf($server, 'ratelimit zone=s limit=5 charge=$bytes_sent;'),
               qr/"ratelimit" directive: "charge=\$bytes_sent" in the stream block: charge= is for HTTP requests/,
               'charge= in stream');
stream_refused("ratelimit_zone s 1m; " . sprintf($server, 'ratelimit zone=s limit=0;'),
               qr/"ratelimit" directive: invalid "limit=0": expected an integer from 1 to 1000000000/,
               'the core parses a stream rule as an http one');
stream_refused("ratelimit_zone s 1m; " . sprintf($server, 'ratelimit zone=s limit=5; ratelimit_log_level loud;'),
               qr/invalid value "loud" in "ratelimit_log_level" directive: expected "off", "info", "notice", "warn" or "error"/,
               'ratelimit_log_level');
stream_refused("ratelimit_zone s 1m; " . sprintf($server, 'ratelimit off; ratelimit zone=s limit=5;'),
               qr/rules after "ratelimit off" at the same level/, 'rules after off');
stream_refused("ratelimit_zone s 10k; " . sprintf($server, ''),
               qr/size "10k" of zone "s" is too small: the minimum is 32k/, 'a zone too small');

my ($rc, $out) = $t->test_conf($http, main => RLStream::main($t, "ratelimit_zone s 1m; " . sprintf($server, 'ratelimit zone=s key=$ssl_preread_server_name limit=5; ratelimit zone=s limit=9 name=b;')));
is($rc, 0, 'a valid stream configuration passes nginx -t') or diag($out);

SKIP: {
    skip 'nginx has its stream module compiled in', 2 unless RLStream::core_dynamic($t);
    # the stream .so without the stream module loaded first
    my $text = $t->conf_text($http);
    my $stream_so = RLStream::stream_module($t);
    ($rc, $out) = $t->nginx_t("load_module $stream_so;\n$text");
    isnt($rc, 0, 'the stream .so needs ngx_stream_module.so loaded before it');
    like($out, qr/undefined symbol: ngx_stream/, 'and dlopen says so');
}

($rc, $out) = $t->test_conf("ratelimit_zone z 1m; $http");
is($rc, 0, 'the http .so loads alone, without the stream module') or diag($out);

done_testing;
