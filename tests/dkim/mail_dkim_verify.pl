#!/usr/bin/perl
# A second, independent DKIM verifier for the tests: Perl's Mail::DKIM (Debian's
# libmail-dkim-perl), asking DNS only at 127.0.0.1:<port> (tests/dns_server.py).
#   perl mail_dkim_verify.pl <dns port> <message file>...
# Prints one line per file: "<file> <result> <detail>" (result: pass, fail, none, invalid...).
use strict;
use warnings;
use Mail::DKIM::Verifier;
use Net::DNS::Resolver;

my $port = shift @ARGV;
Mail::DKIM::DNS::resolver(Net::DNS::Resolver->new(
    nameservers => ['127.0.0.1'], port => $port, recurse => 1,
    udp_timeout => 5, tcp_timeout => 5, retry => 1));
for my $file (@ARGV) {
    open(my $fh, '<:raw', $file) or die "$file: $!";
    my $dkim = Mail::DKIM::Verifier->new();
    while (my $line = <$fh>) {
        $line =~ s/\015?\012\z/\015\012/;
        $dkim->PRINT($line);
    }
    close $fh;
    $dkim->CLOSE;
    printf "%s %s %s\n", $file, $dkim->result, $dkim->result_detail;
}
